"""Tool calls in a stream: content deltas go to the client as they arrive; tool-call deltas,
the finish chunk and usage-only chunks wait until the stream has ended and its calls are
complete, then the calls the guard settled on are sent as proper chunks (one per call, with
`index`, `id`, `name` and whole `arguments`), then the finish, then the usage."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.guard.repair import Settled
from gateway.reply.chunks import Accumulator

Json = dict[str, Any]
_HEAD = ("id", "created", "model", "system_fingerprint", "service_tier")


class HeldToolCalls:
    def __init__(self, settle: Callable[[Json], Awaitable[Settled]]) -> None:
        self._settle = settle
        self._calls = Accumulator()
        self._content: list[str] = []
        self._head: Json = {}
        self._tail: list[Json] = []  # usage-only chunks, sent last

    def feed(self, chunk: Json) -> Json | None:
        """The chunk to send now (without tool-call deltas or a finish), or None."""
        if not self._head:
            self._head = {k: chunk[k] for k in _HEAD if k in chunk}
        usage = chunk.get("usage")
        if usage:
            self._tail.append({**self._head, "object": "chat.completion.chunk", "choices": []})
            self._tail[-1]["usage"] = usage
        kept = []
        for choice in chunk.get("choices") or []:
            delta = dict(choice.get("delta") or {})
            calls = delta.pop("tool_calls", None)
            if calls:
                self._calls.add({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            if any(value not in (None, "") for value in delta.values()):
                kept.append({**choice, "delta": delta, "finish_reason": None})
        if not kept:
            return None
        out = {k: v for k, v in chunk.items() if k != "usage"}
        out["choices"] = kept
        return out

    async def finish(self) -> list[Json]:
        """After the last upstream chunk: settle the calls; the chunks that end the stream."""
        streamed = "".join(self._content)
        message: Json = {"role": "assistant", "content": streamed or None}
        calls = self._calls.completion()["choices"][0]["message"].get("tool_calls")
        if calls:
            message["tool_calls"] = calls
        settled = await self._settle(message)
        out: list[Json] = []
        final = settled.message.get("content") or ""
        if final and final != streamed and (not streamed or final.startswith(streamed)):
            out.append(self._chunk({"content": final[len(streamed) :]}))
        for index, call in enumerate(settled.message.get("tool_calls") or []):
            out.append(self._chunk({"tool_calls": [{"index": index, **call}]}))
        out.append(self._chunk({}, settled.finish_reason))
        return out + self._tail

    def _chunk(self, delta: Json, finish_reason: str | None = None) -> Json:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head, "object": "chat.completion.chunk", "choices": [choice]}
