"""Which parts of this process share state through Redis (the cache store, breaker state,
rate-limit counters, stored responses) and whether each can reach it right now: one object per
process that /readyz and the `gateway_redis_up` gauge both read (/readyz asks Redis itself at
each probe; the gauge is at most a second old). Unreachable is degraded,
never down: every part falls back to local state and resynchronises by itself, except stored
responses, which answer 503 until Redis is back (docs/DEPLOY.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from gateway.cache.service import SemanticCache
from gateway.ratelimit import RateLimiter
from gateway.resilience.breaker import Breakers
from gateway.responses.store import ResponseStore

WATCH_SECONDS = 1.0
# How long /readyz waits for Redis to answer its own probe: a part that has not answered by
# then is reported unreachable (a probe must answer well inside a Kubernetes probe's 1 s).
PROBE_SECONDS = 0.5


class SharedPart(Protocol):
    """A part that may keep its state in Redis."""

    @property
    def shared(self) -> bool:
        """Configured to share through Redis (the breakers' storage may change on reload)."""
        ...

    @property
    def redis_up(self) -> bool:
        """Reaches Redis now (the cache: and its local index has caught up)."""
        ...

    async def probe_redis(self) -> None:
        """Ask Redis now whether it answers, and take the answer either way: gone, or back."""
        ...


class SharedState:
    """Component name ("cache", "breakers", "rate_limits", "responses") -> its part, built
    once per process; only the parts configured to share are reported."""

    def __init__(self, parts: Mapping[str, SharedPart]) -> None:
        self._parts = dict(parts)

    @classmethod
    def of(
        cls,
        cache: SemanticCache | None,
        breakers: Breakers,
        limiter: RateLimiter,
        responses: ResponseStore | None = None,
    ) -> SharedState:
        from gateway.cache.redis_store import RedisStore

        parts: dict[str, SharedPart] = {}
        if cache is not None and isinstance(cache.store, RedisStore):
            parts["cache"] = cache.store
        parts["breakers"] = breakers
        parts["rate_limits"] = limiter
        if responses is not None:
            parts["responses"] = responses  # listed only when it is the Redis store
        return cls(parts)

    def components(self) -> list[str]:
        """The components that share state now, in the order /readyz lists them."""
        return [name for name, part in self._parts.items() if part.shared]

    def up(self, component: str) -> bool:
        return self._parts[component].redis_up

    def states(self) -> dict[str, bool]:
        """Component -> whether it reaches Redis, for the sharing components."""
        return {name: self.up(name) for name in self.components()}

    async def current(self, timeout: float = PROBE_SECONDS) -> dict[str, bool]:
        """`states` after asking Redis now, for every sharing part at once (/readyz): what it
        reports is the state at the probe, not the last time a request happened to call
        Redis. A part whose probe has not answered within `timeout` is unreachable."""
        names = self.components()
        probes = {name: asyncio.ensure_future(self._parts[name].probe_redis()) for name in names}
        if not probes:
            return {}
        await asyncio.wait(probes.values(), timeout=timeout)
        states = {}
        for name, probe in probes.items():
            answered = probe.done() and not probe.cancelled() and probe.exception() is None
            states[name] = answered and self.up(name)
            if not probe.done():
                probe.cancel()
        return states

    async def watch(self) -> None:
        """Once a second, ask Redis directly for every sharing part: otherwise a part learns
        that Redis is gone, or back, only when a request happens to call it, so an idle
        replica (or one serving cache hits) would report a stale state for as long. The
        `gateway_redis_up` gauge reads what this finds."""
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            for name in self.components():
                with contextlib.suppress(Exception):  # a part's own probe logs its failure
                    await self._parts[name].probe_redis()

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """`watch` in the background while the block runs (when anything shares at all)."""
        task = None
        if self.components():
            task = asyncio.get_running_loop().create_task(self.watch())
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
