"""Every Redis client of the process, from one place: the parts that share state (the cache
store, the circuit breakers, the rate limits) take theirs here instead of each building its own.

Clients asking for the same server with the same timeouts share one connection pool (per event
loop: an asyncio pool belongs to the loop it connects on). The parts differ only in how long
they may wait on Redis before doing without, so the timeouts are a parameter, not separate
code; the retry policy is the same for all: one immediate retry on a fresh connection, no
backoff (after a Redis restart each pooled connection is stale once, and that must not count
as an outage; a call that fails again fails at once, and its part falls back). A pool is
counted out to its users and closed when the last one gives its client back.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

C = TypeVar("C", aioredis.Redis, redis.Redis)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds a part waits on Redis: for an answer (`socket`) and for a connection."""

    socket: float
    connect: float


@dataclass(slots=True)
class _Pooled(Generic[C]):
    client: C
    users: int = 0


class RedisConnections:
    """The pools of one process. `client` and `sync_client` hand out a shared client (the
    asyncio one for the running loop); give each back once with `release` / `release_sync`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # in-process test servers run loops on other threads
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, Timeouts], _Pooled[aioredis.Redis]]
        ] = weakref.WeakKeyDictionary()
        self._sync: dict[tuple[str, Timeouts], _Pooled[redis.Redis]] = {}

    def client(self, url: str, timeouts: Timeouts) -> aioredis.Redis:
        """The shared asyncio client for `url` and `timeouts` on the running loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            pools = self._async.setdefault(loop, {})
            return _take(
                pools,
                url,
                timeouts,
                lambda: aioredis.Redis.from_url(
                    url, retry=AsyncRetry(NoBackoff(), 1), **_options(timeouts)
                ),
            )

    async def release(self, client: aioredis.Redis) -> None:
        """Give back a client from `client`; the last user closes the pool."""
        with self._lock:
            closing = _give_back(list(self._async.values()), client)
        if closing:
            await client.aclose()

    def sync_client(self, url: str, timeouts: Timeouts) -> redis.Redis:
        """The shared blocking client (pybreaker's storage interface is synchronous)."""
        with self._lock:
            return _take(
                self._sync,
                url,
                timeouts,
                lambda: redis.Redis.from_url(
                    url, retry=Retry(NoBackoff(), 1), **_options(timeouts)
                ),
            )

    def release_sync(self, client: redis.Redis) -> None:
        with self._lock:
            closing = _give_back([self._sync], client)
        if closing:
            client.close()

    def pools(self) -> int:
        """Open pools in this process (for tests and diagnostics)."""
        with self._lock:
            return len(self._sync) + sum(len(pools) for pools in self._async.values())


def _options(timeouts: Timeouts) -> dict[str, Any]:
    """What every client is made with but its retry (the asyncio and blocking ones differ)."""
    return {
        "socket_timeout": timeouts.socket,
        "socket_connect_timeout": timeouts.connect,
        "health_check_interval": 0,
    }


def _take(
    pools: dict[tuple[str, Timeouts], _Pooled[C]],
    url: str,
    timeouts: Timeouts,
    connect: Callable[[], C],
) -> C:
    """The pool's client for (url, timeouts), made by `connect` if there is none; one user more."""
    pooled = pools.get((url, timeouts))
    if pooled is None:
        pooled = pools[url, timeouts] = _Pooled(connect())
    pooled.users += 1
    return pooled.client


def _give_back(pools: list[dict[tuple[str, Timeouts], _Pooled[C]]], client: C) -> bool:
    """One user fewer for `client`'s pool; True when that was the last (the caller closes)."""
    for by_key in pools:
        for key, pooled in by_key.items():
            if pooled.client is client:
                pooled.users -= 1
                if pooled.users == 0:
                    del by_key[key]
                    return True
                return False
    raise ValueError("this Redis client was not handed out here (or was given back already)")


CONNECTIONS = RedisConnections()


class SharedClient:
    """One part's asyncio client: taken from the shared pools on first use (so on the loop
    that uses it, wherever the part was built), given back by `aclose`."""

    def __init__(
        self, url: str, timeouts: Timeouts, connections: RedisConnections = CONNECTIONS
    ) -> None:
        self.url = url
        self.timeouts = timeouts
        self._connections = connections
        self._client: aioredis.Redis | None = None

    @property
    def redis(self) -> aioredis.Redis:
        if self._client is None:
            self._client = self._connections.client(self.url, self.timeouts)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await self._connections.release(client)
