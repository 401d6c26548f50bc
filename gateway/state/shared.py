"""What lives in Redis when replicas share state (the cache store, breaker state, rate-limit
counters), and whether each part can reach it right now. Unreachable is degraded, never down:
every part falls back to local state and resynchronises by itself (docs/DEPLOY.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.cache.service import SemanticCache
from gateway.ratelimit import RateLimiter
from gateway.resilience.breaker import Breakers


def shared_parts(
    cache: SemanticCache | None, breakers: Breakers, limiter: RateLimiter
) -> dict[str, Callable[[], bool]]:
    """Component -> a check that its Redis is reachable (and, for the cache, synchronised),
    for the components configured to share state through Redis."""
    from gateway.cache.redis_store import RedisStore

    parts: dict[str, Callable[[], bool]] = {}
    if cache is not None and isinstance(cache.store, RedisStore):
        store = cache.store
        parts["cache"] = lambda: store.synced
    if breakers.shared:
        parts["breakers"] = lambda: breakers.redis_health.up
    if limiter.shared_up is not None:
        parts["rate_limits"] = lambda: bool(limiter.shared_up)
    return parts


WATCH_SECONDS = 1.0


async def watch(breakers: Breakers, limiter: RateLimiter) -> None:
    """Once a second, ask Redis directly for the parts that report it unreachable: they
    otherwise learn it is back only when a request happens to call it, so an idle replica (or
    one serving cache hits) would report degraded long after Redis returned. The cache's
    follower reconnects on its own."""
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        await breakers.probe_redis()
        await limiter.probe_shared()
