"""The items and content parts of a Response, built one way: for the output of a plain
answer (output.py), the items a stream opens and closes (events.py), and the input items a
request lists (request.py); and the ids they carry."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

Json = dict[str, Any]


def new_id(prefix: str) -> str:
    """An item id: its kind's prefix and 48 random hex characters."""
    return f"{prefix}_{os.urandom(24).hex()}"


def message_item(item_id: str, content: list[Json], status: str) -> Json:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def text_part(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def refusal_part(refusal: str) -> Json:
    return {"type": "refusal", "refusal": refusal}


def reasoning_item(item_id: str, content: list[Json], status: str) -> Json:
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def reasoning_part(text: str) -> Json:
    return {"type": "reasoning_text", "text": text}


# A text part's kind -> an empty one
PARTS: dict[str, Callable[[str], Json]] = {
    "output_text": text_part,
    "refusal": refusal_part,
    "reasoning_text": reasoning_part,
}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> Json:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
