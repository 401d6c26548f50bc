"""Everything built from one Settings: providers, knowledge bases, the upstream executor and the
pipeline. A config reload builds a new Runtime and swaps the reference; requests in flight keep
the one they started with. What must outlive a reload (the cache, the circuit breakers) is
owned by the application and passed in."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from gateway.cache.factory import shared_embedder
from gateway.cache.service import SemanticCache
from gateway.config import Settings
from gateway.guard.conversation import ConversationGuard
from gateway.guard.tool_guard import ToolCallGuard
from gateway.pipeline import Pipeline
from gateway.rag.service import Knowledge
from gateway.resilience.breaker import Breakers
from gateway.resilience.executor import UpstreamExecutor
from gateway.routing.router import Router
from gateway.upstream import Upstreams


@dataclass(slots=True)
class Runtime:
    settings: Settings
    upstreams: Upstreams
    knowledge: Knowledge
    router: Router
    pipeline: Pipeline
    active: int = 0  # requests running on this runtime
    _idle: asyncio.Event | None = None
    _probing: asyncio.Task[None] | None = None  # the providers' health probes

    def enter(self) -> None:
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0 and self._idle is not None:
            self._idle.set()

    async def idle(self) -> None:
        """Return once no request is running on this runtime."""
        if self.active:
            self._idle = asyncio.Event()
            await self._idle.wait()

    @classmethod
    def build(
        cls, settings: Settings, breakers: Breakers, cache: SemanticCache | None = None
    ) -> Runtime:
        upstreams = Upstreams(settings)
        for route in settings.routes.values():
            for deployment in route.deployments:
                breakers.get(deployment.key)  # exported (and on the admin API) from the start
        knowledge = Knowledge(settings, breakers)
        executor = UpstreamExecutor(settings, upstreams, breakers)
        conversation = ConversationGuard(settings, executor)
        tool_guard = ToolCallGuard(settings, executor)
        routed = bool(settings.routing.aliases)
        embedder = shared_embedder(settings.file.cache.embedder) if routed else None
        router = Router(settings, embedder, executor.can_answer)
        pipeline = Pipeline(settings, executor, knowledge, conversation, tool_guard, router, cache)
        return cls(settings, upstreams, knowledge, router, pipeline)

    async def start(self) -> None:
        await self.knowledge.start()
        await self.router.start()
        interval = self.settings.resilience.probe_seconds
        if interval > 0 and self._probing is None:
            self._probing = asyncio.get_running_loop().create_task(
                self.upstreams.watch(interval), name="provider-probes"
            )

    async def close(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probing
        await self.router.close()
        await self.knowledge.close()
        await self.upstreams.close()


class RuntimeRef:
    """The current Runtime (swapped whole, never mutated), and the requests in flight on the
    process, whichever runtime they run on."""

    def __init__(self, runtime: Runtime) -> None:
        self.current = runtime
        self.in_flight = 0

    def enter(self) -> int:
        """Count a request in; returns how many are running, itself included."""
        self.in_flight += 1
        return self.in_flight

    def leave(self) -> None:
        self.in_flight -= 1
