"""The shared response store: each stored response one Redis string, so every replica reads
what any replica stored (`responses.store.type: redis`, the server and prefix from `redis:`).

A row is `<namespace>:<hex SHA-256 of tenant and id>` (namespace `gateway:responses` by
default) holding the orjson blob, expiring at its TTL: Redis expires it itself, so nothing
sweeps (a continuation renews its chain's rows). Per-tenant quotas are counted in Redis, so
every replica counts the same rows: each owner (a hash of the tenant) has a sorted set of its
rows by expiry and a hash of their sizes with their total; a write is one script that drops
the owner's expired rows, checks the quota and writes, or refuses (`_WRITE`). A row's owner is
kept beside it (`<row>:owner`) for deletes. Also bounded by the size cap per response and the
server's `maxmemory` policy.

Redis unreachable: a get or delete is a 503 (`store_unavailable`) the client can retry, a put
is logged and counted and the response not kept; for a second after a failure Redis is not
asked at all, so an outage costs no latency. /readyz lists "responses" among the shared parts
(gateway/state/shared.py), degraded while Redis is away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.config.responses import Quota
from gateway.responses.backend import OnFailure, QuotaRefused, ResponseStore, owner_key
from gateway.state.health import RedisHealth
from gateway.state.redis import SharedClient, Timeouts

log = logging.getLogger("gateway.responses")

# A client waiting on its own conversation: longer than this is an outage, answered with a 503.
SOCKET_TIMEOUT = 1.0
CONNECT_TIMEOUT = 0.5

T = TypeVar("T")


class RedisPaused(RedisError):
    """Not asked: Redis failed less than a second ago."""


# The scripts name some keys they derive (an owner's set from a row's pointer): fine on the one
# Redis server the gateway's replicas share, not on a Redis Cluster (nor is the rest of it).
# The owner's bookkeeping, before a write: rows past their expiry leave the set and the total.
_PRUNE = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
for _, row in ipairs(gone) do
  local size = redis.call('HGET', KEYS[3], row)
  if size then
    redis.call('HDEL', KEYS[3], row)
    redis.call('HINCRBY', KEYS[3], '#total', -tonumber(size))
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
"""
# KEYS: row, owner's rows (by expiry), owner's sizes, row's owner pointer. ARGV: now (ms), blob,
# expires at (ms), max responses (-1: none), max bytes (-1: none), owner name.
# Returns {written 1|0, rows, bytes} for the owner after it.
_WRITE = (
    _PRUNE
    + """
local size = string.len(ARGV[2])
local rows = redis.call('ZCARD', KEYS[2])
local used = tonumber(redis.call('HGET', KEYS[3], '#total') or '0')
local before = redis.call('HGET', KEYS[3], KEYS[1])
if before then
  rows = rows - 1
  used = used - tonumber(before)
end
local max_rows, max_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
if (max_rows >= 0 and rows + 1 > max_rows) or (max_bytes >= 0 and used + size > max_bytes) then
  return {0, rows, used}
end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
redis.call('SET', KEYS[4], ARGV[6], 'PXAT', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], size)
redis.call('HINCRBY', KEYS[3], '#total', size - tonumber(before or '0'))
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last[2])
redis.call('PEXPIREAT', KEYS[3], last[2])
return {1, rows + 1, used + size}
"""
)
# KEYS: the row, its owner pointer. ARGV: the prefix of owner keys. Returns 1 when it existed.
_DELETE = """
local owner = redis.call('GET', KEYS[2])
local removed = redis.call('DEL', KEYS[1], KEYS[2])
if owner then
  local sizes = ARGV[1] .. owner .. ':sizes'
  local size = redis.call('HGET', sizes, KEYS[1])
  if size then
    redis.call('HDEL', sizes, KEYS[1])
    redis.call('HINCRBY', sizes, '#total', -tonumber(size))
  end
  redis.call('ZREM', ARGV[1] .. owner .. ':rows', KEYS[1])
end
return removed > 0 and 1 or 0
"""
# KEYS: rows. ARGV: expires at (ms), the prefix of owner keys, now (ms). Each row, its owner
# pointer and its place in its owner's set live until the new expiry.
_TOUCH = """
for _, row in ipairs(KEYS) do
  if redis.call('PEXPIREAT', row, ARGV[1]) == 1 then
    local pointer = row .. ':owner'
    redis.call('PEXPIREAT', pointer, ARGV[1])
    local owner = redis.call('GET', pointer)
    if owner then
      local set, sizes = ARGV[2] .. owner .. ':rows', ARGV[2] .. owner .. ':sizes'
      redis.call('ZADD', set, 'XX', ARGV[1], row)
      local left = redis.call('PTTL', set)
      if left >= 0 and tonumber(ARGV[3]) + left < tonumber(ARGV[1]) then
        redis.call('PEXPIREAT', set, ARGV[1])
        redis.call('PEXPIREAT', sizes, ARGV[1])
      end
    end
  end
end
return 0
"""


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
        quotas: Callable[[str], Quota] | None = None,
    ) -> None:
        super().__init__(
            ttl_seconds,
            on_failure=on_failure,
            max_response_bytes=max_response_bytes,
            quotas=quotas,
        )
        self._client = SharedClient(url, Timeouts(SOCKET_TIMEOUT, CONNECT_TIMEOUT))
        self._prefix = f"{namespace}:"
        self._owners = f"{namespace}:owner:"  # each owner's rows and sizes are under it
        # Each owner's (rows, bytes) as Redis last said (a write's answer): the up-front check's
        # view; the write itself checks in Redis, atomically, what every replica stored.
        self._usage: dict[bytes, tuple[int, int]] = {}
        self.health = RedisHealth(
            log, "stored responses", "reads answer 503 and new responses are not kept"
        )

    @property
    def _redis(self) -> aioredis.Redis:
        return self._client.redis

    def redis_key(self, key: bytes) -> str:
        return self._prefix + key.hex()

    def usage(self, tenant: str) -> tuple[int, int]:
        return self._usage.get(owner_key(tenant), (0, 0))

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
        """The row, if its owner's quota (counted in Redis) has room; else QuotaRefused."""
        row, name = self.redis_key(key), owner.hex()
        owned = self._owners + name
        keys = [row, f"{owned}:rows", f"{owned}:sizes", f"{row}:owner"]
        limits = [_limit(quota.max_responses), _limit(quota.max_bytes)]
        args: list[bytes | str | int] = [_ms(time.time()), blob, _ms(expires_at), *limits, name]
        written, rows, used = await self._call(
            "put", lambda: self._redis.eval(_WRITE, len(keys), *keys, *args)
        )
        self._usage[owner] = (int(rows), int(used))
        if not written:
            raise QuotaRefused()

    async def _touch(self, keys: list[bytes], expires_at: float) -> None:
        rows = [self.redis_key(key) for key in keys]
        args: list[str | int] = [_ms(expires_at), self._owners, _ms(time.time())]
        await self._call("put", lambda: self._redis.eval(_TOUCH, len(rows), *rows, *args))

    async def _read(self, key: bytes, now: float) -> bytes | None:
        value = await self._call("get", lambda: self._redis.get(self.redis_key(key)))
        assert not isinstance(value, str)  # the client does not decode replies
        return value

    async def _remove(self, key: bytes, now: float) -> bool:
        row = self.redis_key(key)
        keys, prefix = [row, f"{row}:owner"], self._owners
        removed = await self._call(
            "delete", lambda: self._redis.eval(_DELETE, len(keys), *keys, prefix)
        )
        return bool(removed)

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


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _limit(value: int | None) -> int:
    return -1 if value is None else value
