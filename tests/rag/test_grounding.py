"""Level 1: where the sources go in the prompt, and what the client receives."""

from __future__ import annotations

from gateway.rag.base import Passage
from gateway.rag.grounding import INSTRUCTION, grounded_messages, sources_field

PASSAGES = [
    Passage("Refunds take 5 days.", 0.61234, "refunds.md", "Refunds"),
    Passage("  Shipping is free over $50.\n", 0.4, "shipping.md"),
]


def test_sources_are_numbered_after_the_apps_own_system_prompt() -> None:
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "developer", "content": "JSON only."},
        {"role": "user", "content": "refund?"},
    ]
    out = grounded_messages(messages, PASSAGES)
    assert out[:2] == messages[:2] and out[3:] == messages[2:]
    content = out[2]["content"]
    assert out[2]["role"] == "system" and content.startswith(INSTRUCTION)
    assert "[1] (refunds.md - Refunds)\nRefunds take 5 days." in content
    assert "[2] (shipping.md)\nShipping is free over $50." in content


def test_without_a_system_prompt_the_sources_come_first() -> None:
    out = grounded_messages([{"role": "user", "content": "q"}], PASSAGES)
    assert out[0]["role"] == "system" and out[1] == {"role": "user", "content": "q"}


def test_the_client_gets_citation_numbers_and_rounded_scores() -> None:
    assert sources_field(PASSAGES)[0] == {
        "index": 1,
        "source": "refunds.md",
        "title": "Refunds",
        "score": 0.6123,
        "text": "Refunds take 5 days.",
    }
