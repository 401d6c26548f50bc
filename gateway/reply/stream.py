"""A started upstream stream: the first batch of chunks is in hand when the client sees headers.

Waiting for the first chunk before answering lets a failure before the first byte become a
plain HTTP error (or, later, a fallback), while every chunk after it is relayed as it arrives.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.reply.chunks import Accumulator

Json = dict[str, Any]


class ChunkFilter(Protocol):
    """Sits between the upstream and the client: changes, holds or adds chunks."""

    def feed(self, chunk: Json) -> Json | None: ...

    async def finish(self) -> list[Json]: ...


class ChunkStream:
    def __init__(
        self,
        ctx: RequestContext,
        source: AsyncGenerator[list[Json], None],
        first: list[Json] | None,
        client_wants_usage: bool,
        on_complete: Callable[[Json], None] | None,
        on_break: Callable[[], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._source = source
        self._first = first
        self._client_wants_usage = client_wants_usage
        self._on_complete = on_complete
        self._on_break = on_break
        self._accumulator = Accumulator() if on_complete else None
        self._filter: ChunkFilter | None = None

    @classmethod
    async def open(
        cls,
        ctx: RequestContext,
        source: AsyncIterator[list[Json]],
        client_wants_usage: bool,
        on_complete: Callable[[Json], None] | None = None,
        on_break: Callable[[], None] | None = None,
    ) -> ChunkStream:
        """Send the request and wait for the first chunk; errors before it raise here.

        `on_complete` receives the accumulated completion once the stream has ended normally
        (never for a stream that broke or that the client left); `on_break` hears of an
        upstream failure after the first chunk (the circuit breaker counts it)."""
        assert isinstance(source, AsyncGenerator)
        started = time.perf_counter()
        try:
            first = await anext(source, None)
        except BaseException:
            await source.aclose()
            raise
        ctx.first_token_seconds = time.perf_counter() - started
        return cls(ctx, source, first, client_wants_usage, on_complete, on_break)

    def on_complete(self, callback: Callable[[Json], None]) -> None:
        """Hear of the whole completion once the stream has ended normally (set before relay)."""
        self._on_complete = callback
        self._accumulator = Accumulator()

    def set_filter(self, chunk_filter: ChunkFilter) -> None:
        self._filter = chunk_filter

    def annotate_first(self, fields: Json) -> None:
        """Add fields to the first chunk the client receives (the sources of a grounded answer)."""
        if self._first:
            self._first[0].update(fields)

    def prepend(self, make: Callable[[Json], Json]) -> None:
        """Send `make(first chunk)` before the first chunk (a disclaimer, in the stream's id)."""
        first = self._first[0] if self._first else {}
        self._first = [make(first), *(self._first or [])]

    async def relay(self) -> AsyncGenerator[list[Json], None]:
        """The chunks to send to the client, in the batches they arrived in. Close it
        (aclosing) to release the upstream."""
        started = time.perf_counter()
        try:
            if self._first is not None:
                batch, self._first = self._first, None
                yield self._outgoing(batch)
            try:
                async for batch in self._source:
                    yield self._outgoing(batch)
            except GatewayError:
                # After the first byte there is no falling back: the client gets an SSE error
                # event; the stream is counted as broken and never cached.
                self._ctx.stream_broken = True
                if self._on_break:
                    self._on_break()
                raise
            if self._filter is not None:
                yield [chunk for chunk in await self._filter.finish() if self._relay(chunk)]
            if self._on_complete and self._accumulator:
                self._on_complete(self._accumulator.completion())
        finally:
            self._ctx.upstream_seconds = (self._ctx.first_token_seconds or 0.0) + (
                time.perf_counter() - started
            )
            await self._source.aclose()

    def _outgoing(self, batch: list[Json]) -> list[Json]:
        if self._filter is not None:
            batch = [c for c in map(self._filter.feed, batch) if c is not None]
        return [chunk for chunk in batch if self._relay(chunk)]

    def _relay(self, chunk: Json) -> bool:
        """Account usage; hide it (and usage-only chunks) when only the gateway asked for it."""
        if self._accumulator:
            self._accumulator.add(chunk)
        usage = chunk.get("usage")
        if usage:
            self._ctx.record_usage(usage)
        if self._ctx.prompt_tokens_estimate is not None:  # the stream may bring no usage
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if isinstance(content, str):
                    self._ctx.streamed_chars += len(content)
        if self._client_wants_usage:
            return True
        chunk.pop("usage", None)
        return not (usage and not chunk.get("choices"))
