"""What degraded answers look like. Each is a normal OpenAI response the SDK parses:

    level 2/3  the model's answer, beginning with a disclaimer (no or failed retrieval)
    level 4    no model could answer: a completion (or stream) saying so, with Retry-After,
               or, if the policy prefers, a 503 error

Texts come from config by the language of the user's message.
"""

from __future__ import annotations

import re
import time
from typing import Any

from gateway import wire
from gateway.reply.stage import Stage

Json = dict[str, Any]

# Han, Hiragana/Katakana, Hangul: enough to pick the shipped Chinese text over the English one.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")

HEADER = "x-gateway-degraded"
LEVEL_HEADER = "x-gateway-level"
CAUSE_HEADER = "x-gateway-unavailable-cause"  # level 4: the last failure's code
REASONS = {2: "general-knowledge", 3: "retrieval-unavailable", 4: "unavailable"}


def language_of(text: str | None) -> str:
    return "zh" if text and _CJK.search(text) else "en"


def localized(texts: dict[str, str], user_text: str | None) -> str:
    return texts.get(language_of(user_text)) or texts["en"]


def with_disclaimer(completion: Json, disclaimer: str) -> Json:
    """Prefix each choice's text answer (tool-call-only choices have no text to prefix)."""
    for choice in completion.get("choices") or []:
        message = choice.get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            message["content"] = f"{disclaimer}\n\n{message['content']}"
    return completion


def disclaimer_chunk(first: Json, disclaimer: str, choices: int) -> Json:
    """A chunk to send before the model's first one, in its id, model and time."""
    return {
        "id": first.get("id") or wire.completion_id(),
        "object": "chat.completion.chunk",
        "created": first.get("created") or int(time.time()),
        "model": first.get("model") or "",
        "choices": [
            {
                "index": i,
                "delta": {"role": "assistant", "content": f"{disclaimer}\n\n"},
                "logprobs": None,
                "finish_reason": None,
            }
            for i in range(choices)
        ],
    }


class Disclaimer(Stage):
    """Levels 2 and 3: the answer begins with the disclaimer (a stream: in a chunk of its own
    before the model's first)."""

    def __init__(self, text: str, choices: int) -> None:
        self._text = text
        self._choices = choices

    async def answer(self, completion: Json) -> Json:
        return with_disclaimer(completion, self._text)

    def opening(self, first: list[Json]) -> list[Json]:
        return [disclaimer_chunk(first[0] if first else {}, self._text, self._choices), *first]


def unavailable_completion(model: str, message: str, choices: int) -> Json:
    return {
        "id": wire.completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": message, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
            for i in range(choices)
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
