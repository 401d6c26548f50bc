"""What a rate-limit backend is (memory.py for one process, redis_backend.py for replicas):
the limits it checks, the refusal it returns, and the calls the limiter makes on it. Both
backends and the limiter import this; it imports neither, so imports run one way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config.rate_limits import RateLimitConfig

LimitName = Literal["requests_per_second", "concurrent", "tokens_per_minute"]

CONCURRENT_RETRY_SECONDS = 1.0  # nobody knows when a slot frees up: a short wait


@dataclass(frozen=True, slots=True)
class Refusal:
    """Which limit refused a request, and in how many seconds it would admit it."""

    limit: LimitName
    retry_after: float


class Backend(Protocol):
    """Where the counters live. `acquire` checks every limit set in `limits` and, only if all
    admit the request, consumes from each (`requests` of the bucket, the concurrency `slot`
    when given, and `tokens` of the minute's budget); otherwise it changes nothing. More
    `requests` than the bucket can hold (its size less `already`, what the same request took
    before) are admitted when it is full and leave it in debt, as `tokens` beyond the
    minute's limit do; without a `slot` concurrency is not checked (a request's own fan-out,
    charged after it took its slot)."""

    async def acquire(
        self,
        tenant: str,
        limits: RateLimitConfig,
        tokens: int,
        slot: str | None,
        requests: int = 1,
        already: int = 0,
    ) -> Refusal | None: ...

    async def release(self, tenant: str, slot: str) -> None: ...

    async def record_tokens(self, tenant: str, tokens: int) -> None: ...

    async def aclose(self) -> None: ...
