"""Converting between a chat completion and its stream of chunks, both ways.

`Accumulator` rebuilds the completion a stream carried (to cache it, or to validate its tool
calls); `replay` turns a stored completion back into a proper stream (cache hits and
degraded answers for `stream: true` requests).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from gateway import wire

Json = dict[str, Any]

_REPLAY_PIECE = re.compile(r"\S+\s*|\s+")
_WORDS_PER_CHUNK = 4


class Accumulator:
    """Feed it every chunk of one stream; `completion()` is what a plain call would have said."""

    def __init__(self) -> None:
        self._head: Json = {}
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._tool_calls: dict[int, Json] = {}
        self._finish_reason: str | None = None
        self._role = "assistant"
        self._usage: Json | None = None
        self._choices: set[int] = set()

    def add(self, chunk: Json) -> None:
        if not self._head:
            self._head = {k: v for k, v in chunk.items() if k not in ("choices", "usage", "object")}
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            self._choices.add(choice.get("index", 0))
            delta = choice.get("delta") or {}
            self._role = delta.get("role") or self._role
            if delta.get("content"):
                self._content.append(delta["content"])
            if delta.get("reasoning_content"):
                self._reasoning.append(delta["reasoning_content"])
            if delta.get("refusal"):
                self._refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                self._merge_tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]

    @property
    def single_choice(self) -> bool:
        return len(self._choices) <= 1

    def completion(self) -> Json:
        message: Json = {
            "role": self._role,
            "content": "".join(self._content) or None,
            "refusal": "".join(self._refusal) or None,  # the schema requires it, null or not
        }
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._tool_calls:
            message["tool_calls"] = [self._tool_calls[i] for i in sorted(self._tool_calls)]
        return {
            **self._head,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish_reason,
                }
            ],
            "usage": self._usage,
        }

    def _merge_tool_call(self, delta: Json) -> None:
        index = delta.get("index", 0)
        call = self._tool_calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if delta.get("id"):
            call["id"] = delta["id"]
        if delta.get("type"):
            call["type"] = delta["type"]
        function = delta.get("function") or {}
        if function.get("name"):
            call["function"]["name"] += function["name"]
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]


async def replay(completion: Json, include_usage: bool) -> AsyncIterator[list[Json]]:
    """The chunks of a stream that says what `completion` says: a role chunk, content in
    word-group pieces, tool calls, the finish chunk, and a usage chunk when asked for. They
    are all at hand, so they come as one batch (one write)."""
    yield list(_replay_chunks(completion, include_usage))


def _replay_chunks(completion: Json, include_usage: bool) -> Iterator[Json]:
    id_, created = wire.completion_id(), int(time.time())
    model = completion.get("model", "")
    extra = {k: completion[k] for k in ("system_fingerprint", "service_tier") if k in completion}
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def make(delta: Json | None, finish: str | None = None, **kw: Any) -> Json:
        return wire.chunk(id_, model, created, delta, finish, **extra, **kw)

    first: Json = {"sources": completion["sources"]} if "sources" in completion else {}
    yield make({"role": "assistant", "content": ""}, **first)
    pieces = _REPLAY_PIECE.findall(message.get("content") or "")
    for start in range(0, len(pieces), _WORDS_PER_CHUNK):
        yield make({"content": "".join(pieces[start : start + _WORDS_PER_CHUNK])})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield make({"tool_calls": [{"index": index, **call}]})
    yield make({}, choice.get("finish_reason") or "stop")
    if include_usage and completion.get("usage"):
        yield make(None, usage=completion["usage"])
