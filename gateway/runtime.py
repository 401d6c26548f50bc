"""Everything built from one Settings: providers and the pipeline. A config reload builds a new
Runtime and swaps the reference; requests in flight keep the one they started with."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.cache.service import SemanticCache
from gateway.config import Settings
from gateway.pipeline import Pipeline
from gateway.upstream import Upstreams


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    upstreams: Upstreams
    pipeline: Pipeline

    @classmethod
    def build(cls, settings: Settings, cache: SemanticCache | None = None) -> Runtime:
        """`cache` outlives runtimes (its model and store are per process), so it is passed in."""
        upstreams = Upstreams(settings)
        return cls(settings, upstreams, Pipeline(settings, upstreams, cache))

    async def close(self) -> None:
        await self.upstreams.close()


class RuntimeRef:
    """The current Runtime. Swapped whole, never mutated."""

    def __init__(self, runtime: Runtime) -> None:
        self.current = runtime
