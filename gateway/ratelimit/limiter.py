"""The rate limiter's front: the 429 error, the permit a request holds, and the choice of
backend (memory for one process, Redis for replicas sharing one budget per tenant)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from types import TracebackType

from gateway.config.rate_limits import RateLimitConfig
from gateway.config.redis import RedisTarget
from gateway.errors import GatewayError
from gateway.ratelimit.backend import Backend, LimitName
from gateway.ratelimit.memory import MemoryBackend
from gateway.ratelimit.redis_backend import RedisBackend

_LABELS: dict[LimitName, str] = {
    "requests_per_second": "requests per second",
    "concurrent": "concurrent requests",
    "tokens_per_minute": "tokens per minute",
}


class RateLimited(GatewayError):
    """HTTP 429 in OpenAI's shape: type "requests" or "tokens", code "rate_limit_exceeded",
    and a Retry-After header in whole seconds (at least 1)."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, tenant: str, limit: LimitName, value: float, retry_after: float) -> None:
        # The epsilon keeps float noise (2.0000000001 s) from adding a whole second.
        seconds = max(1, math.ceil(retry_after - 1e-6))
        super().__init__(
            f"Rate limit reached for tenant '{tenant}' on {_LABELS[limit]}: limit {value:g}. "
            f"Please retry in {seconds} s.",
            type="tokens" if limit == "tokens_per_minute" else "requests",
            headers={"Retry-After": str(seconds)},
        )
        self.tenant = tenant
        self.limit = limit
        self.retry_after = seconds


class Permit:
    """An admitted request. Release it when the request ends (`async with permit:` does, also
    on errors and cancellation) to free its concurrency slot; report completion tokens with
    `record_tokens`, before or after the release. Both are idempotent where it matters:
    releasing twice frees one slot."""

    def __init__(
        self,
        backend: Backend | None,
        tenant: str,
        slot: str | None,
        counts_tokens: bool,
        limits: RateLimitConfig | None = None,
    ) -> None:
        self._backend = backend
        self.tenant = tenant
        self._slot = slot
        self._counts_tokens = counts_tokens
        self._limits = limits

    @property
    def holds_slot(self) -> bool:
        return self._slot is not None

    async def release(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None and self._backend is not None:
            await self._backend.release(self.tenant, slot)

    async def charge(self, requests: int, tokens: int = 0) -> None:
        """Count `requests` more requests and `tokens` more prompt tokens against the limits
        this permit was admitted under (a request that fans out into several upstream calls:
        each one counts, as if sent on its own), or raise RateLimited having counted none.
        More than the bucket holds waits for a full bucket and leaves it in debt."""
        if self._backend is None or self._limits is None or requests <= 0:
            return
        refusal = await self._backend.acquire(
            self.tenant, self._limits, max(0, tokens), None, requests, already=1
        )
        if refusal is not None:
            value = getattr(self._limits, refusal.limit)
            raise RateLimited(self.tenant, refusal.limit, value, refusal.retry_after)

    async def record_tokens(self, tokens: int) -> None:
        """Add tokens to the tenant's minute (the completion's, once the upstream reports them)."""
        if tokens > 0 and self._counts_tokens and self._backend is not None:
            await self._backend.record_tokens(self.tenant, tokens)

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()


def unpaid_tokens(usage: object, charged: int, prompt_at_least: int = 0) -> int:
    """The tokens a call used beyond the `charged` ones counted before it: its prompt's (the
    upstream's count, or `prompt_at_least` when that is larger) past them, and its
    completion's. `usage`: the upstream's usage object, if any."""
    found = usage if isinstance(usage, dict) else {}
    reported, completion = found.get("prompt_tokens"), found.get("completion_tokens")
    prompt = max(prompt_at_least, reported if isinstance(reported, int) else 0)
    return max(0, prompt - charged) + (completion if isinstance(completion, int) else 0)


class RateLimiter:
    """Admits or refuses requests per tenant, against the limits passed with each call (so a
    config reload applies at once, and counters survive it).

    With Redis storage, every replica sees the same budget; when Redis cannot be reached the
    limiter fails OPEN: requests are admitted unlimited, and a warning is logged (at most one
    every 30 s). Rate limiting is a protection, not a reason to refuse all traffic.
    """

    def __init__(
        self,
        storage: RedisTarget | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        slot_ttl_seconds: float = 600.0,
    ) -> None:
        """`storage`: where replicas share the counters (None: this process keeps them).
        `clock` (memory only: Redis uses its own TIME) is injectable for tests.
        `slot_ttl_seconds` (Redis only) bounds how long a concurrency slot outlives a replica
        that crashed holding it; it must exceed the longest request."""
        self._backend: Backend
        self._redis: RedisBackend | None = None
        if storage is not None:
            self._backend = self._redis = RedisBackend(
                storage.url, storage.namespace, slot_ttl_seconds=slot_ttl_seconds
            )
        else:
            self._backend = MemoryBackend(clock)

    @property
    def shared(self) -> bool:
        """Whether the counters are in Redis, shared with other replicas."""
        return self._redis is not None

    @property
    def redis_up(self) -> bool:
        """With Redis storage, whether Redis answered lately (else limits are not enforced)."""
        return self._redis is not None and self._redis.up

    async def probe_redis(self) -> None:
        """With Redis storage: ask Redis now whether it answers (both ways: gone, or back)."""
        if self._redis is not None:
            await self._redis.ping()

    async def acquire(
        self, tenant: str, limits: RateLimitConfig, estimated_tokens: int = 0
    ) -> Permit:
        """Admit one request of `tenant` with `estimated_tokens` prompt tokens, or raise
        RateLimited naming the limit that refused it (the one that clears last)."""
        if limits.unlimited:
            return Permit(None, tenant, None, counts_tokens=False)
        slot = uuid.uuid4().hex if limits.concurrent is not None else None
        refusal = await self._backend.acquire(tenant, limits, max(0, estimated_tokens), slot)
        if refusal is not None:
            value = getattr(limits, refusal.limit)
            raise RateLimited(tenant, refusal.limit, value, refusal.retry_after)
        return Permit(
            self._backend,
            tenant,
            slot,
            counts_tokens=limits.tokens_per_minute is not None,
            limits=limits,
        )

    async def aclose(self) -> None:
        await self._backend.aclose()
