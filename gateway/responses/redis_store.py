"""The shared response store: each stored response one Redis string, so every replica reads
what any replica stored (`responses.store.type: redis`, the server and prefix from `redis:`).

A row is `<namespace>:<hex SHA-256 of tenant and id>` (namespace `gateway:responses` by
default) holding the orjson blob, written with `SET ... EX ttl`: Redis expires it itself, so
nothing sweeps (a continuation renews its chain's rows). Bounded by the TTL, the size cap per
response and the server's `maxmemory` policy, not by a count or per-tenant quotas.

Redis unreachable: a get or delete is a 503 (`store_unavailable`) the client can retry, a put
is logged and counted and the response not kept; for a second after a failure Redis is not
asked at all, so an outage costs no latency. /readyz lists "responses" among the shared parts
(gateway/state/shared.py), degraded while Redis is away.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.config.responses import Quota
from gateway.responses.backend import OnFailure, ResponseStore
from gateway.state.health import RedisHealth
from gateway.state.redis import SharedClient, Timeouts

log = logging.getLogger("gateway.responses")

# A client waiting on its own conversation: longer than this is an outage, answered with a 503.
SOCKET_TIMEOUT = 1.0
CONNECT_TIMEOUT = 0.5

T = TypeVar("T")


class RedisPaused(RedisError):
    """Not asked: Redis failed less than a second ago."""


class RedisResponseStore(ResponseStore):
    outages = (RedisError, OSError)

    def __init__(
        self,
        url: str,
        namespace: str,
        ttl_seconds: int,
        *,
        on_failure: OnFailure | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        super().__init__(ttl_seconds, on_failure=on_failure, max_response_bytes=max_response_bytes)
        self._client = SharedClient(url, Timeouts(SOCKET_TIMEOUT, CONNECT_TIMEOUT))
        self._prefix = f"{namespace}:"
        self.health = RedisHealth(
            log, "stored responses", "reads answer 503 and new responses are not kept"
        )

    @property
    def _redis(self) -> aioredis.Redis:
        return self._client.redis

    def redis_key(self, key: bytes) -> str:
        return self._prefix + key.hex()

    async def start(self) -> None:
        """Nothing to open; an unreachable Redis is reported (and retried) here already."""
        await self.probe_redis()

    async def close(self) -> None:
        await self._client.aclose()

    # --- shared state (gateway/state/shared.py) ---------------------------------------------

    @property
    def shared(self) -> bool:
        return True

    @property
    def redis_up(self) -> bool:
        return self.health.up

    async def probe_redis(self) -> None:
        """Ask Redis whether it answers; an answer ends an outage (and its pause)."""
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            self.health.failed(exc, "ping")
        else:
            self.health.recovered()

    # --- the backend -------------------------------------------------------------------------

    async def _write(
        self, key: bytes, blob: bytes, expires_at: float, owner: bytes, quota: Quota
    ) -> None:
        """Per-tenant quotas are not counted here (docs/RESPONSES.md): the size cap per
        response, the TTL and the server's maxmemory bound a Redis store."""
        await self._call(
            "put", lambda: self._redis.set(self.redis_key(key), blob, ex=self.ttl_seconds)
        )

    async def _touch(self, keys: list[bytes], expires_at: float) -> None:
        async def expire_all() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.expire(self.redis_key(key), self.ttl_seconds)
                await pipe.execute()

        await self._call("put", expire_all)

    async def _read(self, key: bytes, now: float) -> bytes | None:
        value = await self._call("get", lambda: self._redis.get(self.redis_key(key)))
        assert not isinstance(value, str)  # the client does not decode replies
        return value

    async def _remove(self, key: bytes, now: float) -> bool:
        removed: int = await self._call("delete", lambda: self._redis.delete(self.redis_key(key)))
        return removed > 0

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        if self.health.paused():
            raise RedisPaused(f"Redis failed less than a second ago; {what} not tried")
        try:
            result = await call()
        except (RedisError, OSError) as exc:
            self.health.failed(exc, what)  # the throttled warning
            raise
        self.health.ok()
        return result

    def _warn(self, operation: str, exc: BaseException) -> None:
        """RedisHealth has warned already (once per interval), when Redis was asked at all."""
