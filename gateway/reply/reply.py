"""One answer on its way to the client, whatever its shape, and the stages it passes in order.

The pipeline builds a `Reply` from what answered (a whole completion, or a stream whose first
batch is in hand), adds every stage in the order they apply, and awaits `ready()`: a plain
answer has then been through them all; a stream goes through them as it is relayed. The HTTP
layer renders `completion` as JSON or `relay()` as SSE and decides nothing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from gateway.reply.stage import Stage
from gateway.reply.stream import ChunkStream

Json = dict[str, Any]


class Reply:
    def __init__(self, answer: Json | ChunkStream) -> None:
        self._answer = answer
        self._stages: list[Stage] = []
        self._ready = False

    def then(self, stage: Stage | None) -> Reply:
        """Add a stage after those already added (None: a stage that does not apply)."""
        assert not self._ready, "stages are added before ready()"
        if stage is not None:
            self._stages.append(stage)
            if isinstance(self._answer, ChunkStream):
                self._answer.first = stage.opening(self._answer.first)
        return self

    async def ready(self) -> Reply:
        """Run a plain answer through the stages now; a stream's run as it is relayed."""
        if not isinstance(self._answer, ChunkStream):
            for stage in self._stages:
                self._answer = await stage.answer(self._answer)
        self._ready = True
        return self

    @property
    def completion(self) -> Json | None:
        """The plain answer as the stages left it; None for a stream."""
        assert self._ready, "await ready() first"
        return None if isinstance(self._answer, ChunkStream) else self._answer

    def relay(self) -> AsyncGenerator[list[Json], None]:
        """A stream's chunks through the stages, batch by batch. Close it (aclosing) to
        release the upstream."""
        assert self._ready and isinstance(self._answer, ChunkStream)
        return self._answer.relay(self._stages)
