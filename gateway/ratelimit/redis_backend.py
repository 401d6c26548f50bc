"""Counters in Redis, shared by every replica: the same arithmetic as memory.py, made atomic by
running it in Lua scripts (EVALSHA, loaded again on NOSCRIPT) on Redis's own clock (TIME), so
replicas with skewed clocks still agree.

Per tenant, three keys with one hash tag (one cluster slot): the token bucket (a hash), the
requests in flight (a sorted set of slot ids scored by their expiry, so a replica that crashed
holding slots loses them after `slot_ttl_seconds` even while other requests keep the key
alive) and the sliding minute (a hash of two counters). Each key expires once it would read as
empty anyway.

Redis unreachable, slow (0.25 s socket timeouts) or failing: the request is admitted (fail
OPEN), with a warning logged at most every 30 s; for a second after a failure Redis is not
even asked, so an outage costs no latency.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from gateway.config.rate_limits import RateLimitConfig
from gateway.ratelimit.backend import LimitName, Refusal
from gateway.state.health import RedisHealth
from gateway.state.redis import SharedClient, Timeouts

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.commands.core import AsyncScript

log = logging.getLogger("gateway.ratelimit")

SOCKET_TIMEOUT = 0.25

_LIMITS: dict[int, LimitName] = {1: "requests_per_second", 2: "concurrent", 3: "tokens_per_minute"}

# roll() and tokens_wait() are window.roll_window() and window.tokens_wait().
_WINDOW = """
local function now_seconds()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function roll(key, index)
  local w = redis.call('HMGET', key, 'window', 'current', 'previous')
  local window = tonumber(w[1])
  if window == index then return tonumber(w[2]), tonumber(w[3]) end
  if window == index - 1 then return 0, tonumber(w[2]) end
  return 0, 0
end
"""

# KEYS: bucket, slots, minute. ARGV: rate, size, concurrent, slot, slot_ttl, tpm, tokens,
# requests, already (0 for a limit that is not set). Returns {0, '0'} admitted, or {limit,
# seconds to wait}. As memory.py: `requests` above what the bucket can hold wait for a full
# bucket and leave it in debt.
ACQUIRE = (
    _WINDOW
    + """
local now = now_seconds()
local rate, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local concurrent, slot, slot_ttl = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local tpm, tokens = tonumber(ARGV[6]), tonumber(ARGV[7])
local requests, already = tonumber(ARGV[8]), tonumber(ARGV[9])
local refused, wait = 0, 0
local function refuse(limit, seconds)
  if refused == 0 or seconds > wait then refused, wait = limit, seconds end
end

local bucket
if rate > 0 then
  local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
  bucket = tonumber(b[1])
  if bucket == nil then
    bucket = size
  else
    bucket = math.min(size, bucket + math.max(0, now - tonumber(b[2])) * rate)
  end
  local need = math.min(requests, size - already)
  if bucket < need then refuse(1, (need - bucket) / rate) end
end

if concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= concurrent then refuse(2, 1) end
end

local index, current, previous
if tpm > 0 then
  index = math.floor(now / 60)
  current, previous = roll(KEYS[3], index)
  local elapsed = now - index * 60
  local need = math.max(1, math.min(tokens, tpm))
  local seconds = 0
  if previous * (1 - elapsed / 60) + current + need <= tpm then
    seconds = 0
  elseif current + need <= tpm then
    seconds = (previous + current + need - tpm) * 60 / previous - elapsed
  else
    seconds = 60 - elapsed + (current + need - tpm) * 60 / current
  end
  if seconds > 0 then refuse(3, seconds) end
end

if refused > 0 then return {refused, tostring(wait)} end
if rate > 0 then
  redis.call('HSET', KEYS[1], 'tokens', bucket - requests, 'ts', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((size - bucket + requests) / rate * 1000) + 1000)
end
if concurrent > 0 then
  redis.call('ZADD', KEYS[2], now + slot_ttl, slot)
  redis.call('PEXPIRE', KEYS[2], math.ceil(slot_ttl * 1000))
end
if tpm > 0 then
  redis.call('HSET', KEYS[3], 'window', index, 'current', current + tokens, 'previous', previous)
  redis.call('EXPIRE', KEYS[3], 120)
end
return {0, '0'}
"""
)

# KEYS: minute. ARGV: tokens.
RECORD = (
    _WINDOW
    + """
local index = math.floor(now_seconds() / 60)
local current, previous = roll(KEYS[1], index)
redis.call('HSET', KEYS[1], 'window', index, 'current', current + tonumber(ARGV[1]),
  'previous', previous)
redis.call('EXPIRE', KEYS[1], 120)
return 1
"""
)


class RedisBackend:
    def __init__(self, url: str, namespace: str, *, slot_ttl_seconds: float) -> None:
        # A failed call fails open at once (the shared client retries once, without backoff).
        self._client = SharedClient(url, Timeouts(SOCKET_TIMEOUT, SOCKET_TIMEOUT))
        self._namespace = namespace
        self._slot_ttl = slot_ttl_seconds
        self._scripts: dict[str, AsyncScript] = {}  # registered on first use, with the client
        self.health = RedisHealth(log, "rate limits", "admitting requests unlimited")
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def _redis(self) -> aioredis.Redis:
        return self._client.redis

    def _script(self, text: str) -> AsyncScript:
        script = self._scripts.get(text)
        if script is None:
            script = self._scripts[text] = self._redis.register_script(text)
        return script

    def keys(self, tenant: str) -> tuple[str, str, str]:
        base = f"{self._namespace}:ratelimit:{{{tenant}}}"
        return f"{base}:bucket", f"{base}:slots", f"{base}:minute"

    async def acquire(
        self,
        tenant: str,
        limits: RateLimitConfig,
        tokens: int,
        slot: str | None,
        requests: int = 1,
        already: int = 0,
    ) -> Refusal | None:
        if self.paused():
            return None
        args = (
            limits.requests_per_second or 0,
            limits.bucket_size,
            (limits.concurrent or 0) if slot is not None else 0,
            slot or "",
            self._slot_ttl,
            limits.tokens_per_minute or 0,
            tokens,
            requests,
            already,
        )
        # Shielded: if the caller is cancelled meanwhile, a slot the script took is released.
        task = asyncio.ensure_future(self._script(ACQUIRE)(keys=self.keys(tenant), args=args))
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if slot is not None:
                self._later(self._release_when_done(task, tenant, slot))
            raise
        except (RedisError, OSError) as exc:
            self.health.failed(exc, "acquire")
            return None
        self.health.ok()
        limit, wait = int(result[0]), float(result[1])
        return Refusal(_LIMITS[limit], wait) if limit else None

    async def release(self, tenant: str, slot: str) -> None:
        # Shielded: a request cancelled while releasing still frees its slot. Tried even while
        # paused (a slot taken just before an outage would otherwise stay taken for the whole
        # slot TTL), but then in the background, so that the request is not kept waiting.
        key = self.keys(tenant)[1]
        call = self._call("release", lambda: self._redis.zrem(key, slot), always=True)
        if self.paused():
            self._later(call)
        else:
            await asyncio.shield(call)

    async def record_tokens(self, tenant: str, tokens: int) -> None:
        keys = [self.keys(tenant)[2]]
        await asyncio.shield(
            self._call("record tokens", lambda: self._script(RECORD)(keys=keys, args=[tokens]))
        )

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._client.aclose()

    async def _call(
        self, what: str, call: Callable[[], Awaitable[Any]], *, always: bool = False
    ) -> None:
        if self.paused() and not always:
            return
        try:
            await call()
        except (RedisError, OSError) as exc:
            self.health.failed(exc, what)
        else:
            self.health.ok()

    async def _release_when_done(
        self, task: asyncio.Future[object], tenant: str, slot: str
    ) -> None:
        try:
            await task
        except (RedisError, OSError):
            return  # the script did not run, or its slot expires by itself
        await self.release(tenant, slot)

    def _later(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    @property
    def up(self) -> bool:
        """The last call to Redis worked."""
        return self.health.up

    async def ping(self) -> bool:
        """Whether Redis answers now: an answer ends the pause, a failure starts one
        (readiness uses this)."""
        try:
            await self._redis.ping()
        except (RedisError, OSError) as err:
            self.health.failed(err, "ping")
            return False
        self.health.recovered()
        return True

    def paused(self) -> bool:
        """Within a second of a failure: Redis is not asked, requests are admitted."""
        return self.health.paused()
