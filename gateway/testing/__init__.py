"""Test doubles that ship with the gateway: a fake OpenAI-compatible upstream with fault knobs."""
