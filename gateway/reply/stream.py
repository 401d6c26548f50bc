"""A started upstream stream: the first batch of chunks is in hand when the client sees headers.

Waiting for the first chunk before answering lets a failure before the first byte become a
plain HTTP error (or, later, a fallback), while every chunk after it is relayed as it arrives.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from gateway.context import RequestContext
from gateway.errors import GatewayError, InvalidUpstreamAnswer
from gateway.reply.stage import Stage

Json = dict[str, Any]


class ChunkStream:
    def __init__(
        self,
        ctx: RequestContext,
        source: AsyncGenerator[list[Json], None],
        first: list[Json],
        on_break: Callable[[], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._source = source
        self.first = first  # the first batch, until it is relayed; stages may edit it
        self._on_break = on_break

    @classmethod
    async def open(
        cls,
        ctx: RequestContext,
        source: AsyncIterator[list[Json]],
        on_break: Callable[[], None] | None = None,
    ) -> ChunkStream:
        """Send the request and wait for the first chunk; errors before it raise here.

        `on_break` hears of an upstream failure after the first chunk (the circuit breaker
        counts it)."""
        assert isinstance(source, AsyncGenerator)
        started = time.perf_counter()
        try:
            first = await anext(source, None)
        except BaseException:
            await source.aclose()
            raise
        ctx.first_token_seconds = time.perf_counter() - started
        return cls(ctx, source, first or [], on_break)

    async def relay(self, stages: Sequence[Stage]) -> AsyncGenerator[list[Json], None]:
        """The chunks to send to the client, in the batches they arrived in, through `stages`
        in order (gateway/reply/stage.py). Close it (aclosing) to release the upstream."""
        started = time.perf_counter()
        try:
            batch, self.first = self.first, []
            yield _through(stages, batch)
            try:
                async for batch in self._source:
                    for stage in stages:  # _through, inline: this loop runs for every batch
                        batch = stage.chunks(batch)
                    yield batch
            except GatewayError as err:
                # After the first byte there is no falling back: the client gets an SSE error
                # event; the stream is counted as broken and never cached.
                self._ctx.stream_broken = True
                served = self._ctx.served_deployment
                if isinstance(err, InvalidUpstreamAnswer) and served is not None:
                    self._ctx.invalid_answers.append((served.key, err.reason))
                if self._on_break:
                    self._on_break()
                raise
            tail: list[Json] = []
            for stage in stages:  # what each stage adds passes through the stages after it
                tail = stage.chunks(tail) + await stage.finish()
            if tail:
                yield tail
            for stage in stages:
                stage.ended()
        finally:
            self._ctx.upstream_seconds = (self._ctx.first_token_seconds or 0.0) + (
                time.perf_counter() - started
            )
            await self._source.aclose()


def _through(stages: Sequence[Stage], batch: list[Json]) -> list[Json]:
    for stage in stages:
        batch = stage.chunks(batch)
    return batch
