"""A stage: one step an answer takes after the upstream, for a plain answer and a stream alike.

A stage overrides what it does and inherits "pass it on" for the rest. A plain answer goes
through every stage's `answer` in order. A stream goes through every stage's `chunks` in
order, batch by batch as it arrives; when the upstream has ended, each stage's `finish` adds
its chunks (passed on through the stages after it); once the client has every chunk, each
stage hears `ended`. A stream that breaks, or that the client leaves, never ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.reply.chunks import Accumulator

Json = dict[str, Any]


class Stage:
    async def answer(self, completion: Json) -> Json:
        """A plain answer: the completion to pass on."""
        return completion

    def opening(self, first: list[Json]) -> list[Json]:
        """A stream's first batch, in hand when the stage is added: edited as the upstream sent
        it, so every stage's `chunks` sees the edit (sources, a disclaimer)."""
        return first

    def chunks(self, batch: list[Json]) -> list[Json]:
        """A batch of a stream as the stages before passed it on: what to pass on now."""
        return batch

    async def finish(self) -> list[Json]:
        """The upstream ended normally: the chunks to send after all that was passed on."""
        return []

    def ended(self) -> None:
        """The client has every chunk; only `[DONE]` is left to send."""


class OnComplete(Stage):
    """Hands the whole answer to `callback` once it is complete: a plain answer at once, a
    stream's chunks (as the stages before passed them on) rebuilt into a completion once the
    client has them all. A stream that broke or was left is never handed on."""

    def __init__(self, callback: Callable[[Json], None]) -> None:
        self._callback = callback
        self._accumulator = Accumulator()

    async def answer(self, completion: Json) -> Json:
        self._callback(completion)
        return completion

    def chunks(self, batch: list[Json]) -> list[Json]:
        add = self._accumulator.add
        for chunk in batch:
            add(chunk)
        return batch

    def ended(self) -> None:
        self._callback(self._accumulator.completion())
