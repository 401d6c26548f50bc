"""Counters in this process: exact, on a monotonic clock. Nothing here awaits, so each call is
atomic under asyncio and a release cannot be interrupted by a cancellation.

Counters are kept per owner (a tenant, or a tenant's own provider key: a client can make up
as many of those as it likes), and an owner whose counters are back at rest (bucket full,
nothing in flight, no tokens in the sliding minute) is forgotten at the next sweep: it would
start from the same state anew. Sweeps run when the table has doubled since the last one, so
memory follows the owners active in the last minute, at amortized constant cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.config.rate_limits import RateLimitConfig
from gateway.ratelimit.backend import CONCURRENT_RETRY_SECONDS, Refusal
from gateway.ratelimit.window import WINDOW_SECONDS, roll_window, tokens_wait


@dataclass(slots=True)
class _Tenant:
    bucket: float | None = None  # tokens in the bucket at `refilled_at`; None: full
    refilled_at: float = 0.0
    in_flight: int = 0
    window: int | None = None  # the minute `current` counts
    current: float = 0.0
    previous: float = 0.0
    full_at: float = 0.0  # when the bucket is full again


MIN_SWEEP = 1024  # owners held before the first sweep


class MemoryBackend:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._tenants: dict[str, _Tenant] = {}
        self._sweep_at = MIN_SWEEP

    async def acquire(
        self,
        tenant: str,
        limits: RateLimitConfig,
        tokens: int,
        slot: str | None,
        requests: int = 1,
        already: int = 0,
    ) -> Refusal | None:
        now = self._clock()
        state = self._state(tenant, now)
        refusals: list[Refusal] = []

        rate, size = limits.requests_per_second, limits.bucket_size
        bucket = 0.0
        if rate is not None:
            bucket = float(size)
            if state.bucket is not None:
                refill = max(0.0, now - state.refilled_at) * rate
                bucket = min(bucket, state.bucket + refill)
            # More requests than the bucket can hold (less those of the same request taken
            # before) wait for a full bucket and leave it in debt: admitted at all, and paid
            # for before the next one.
            need = min(requests, size - already)
            if bucket < need:
                refusals.append(Refusal("requests_per_second", (need - bucket) / rate))

        concurrent = limits.concurrent
        if slot is not None and concurrent is not None and state.in_flight >= concurrent:
            refusals.append(Refusal("concurrent", CONCURRENT_RETRY_SECONDS))

        tpm = limits.tokens_per_minute
        index = int(now // WINDOW_SECONDS)
        current, previous = roll_window(state.window, state.current, state.previous, index)
        if tpm is not None:
            elapsed = now - index * WINDOW_SECONDS
            wait = tokens_wait(previous, current, elapsed, tokens, tpm)
            if wait > 0:
                refusals.append(Refusal("tokens_per_minute", wait))

        if refusals:
            return max(refusals, key=lambda refusal: refusal.retry_after)
        if rate is not None:
            state.bucket, state.refilled_at = bucket - requests, now
            state.full_at = now + (size - state.bucket) / rate
        if slot is not None:
            state.in_flight += 1
        if tpm is not None:
            state.window, state.current, state.previous = index, current + tokens, previous
        return None

    async def release(self, tenant: str, slot: str) -> None:
        state = self._tenants.get(tenant)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1

    async def record_tokens(self, tenant: str, tokens: int) -> None:
        now = self._clock()
        state = self._state(tenant, now)
        index = int(now // WINDOW_SECONDS)
        current, previous = roll_window(state.window, state.current, state.previous, index)
        state.window, state.current, state.previous = index, current + tokens, previous

    def _state(self, tenant: str, now: float) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            if len(self._tenants) >= self._sweep_at:
                self._sweep(now)
            state = self._tenants[tenant] = _Tenant()
        return state

    def _sweep(self, now: float) -> None:
        """Forget the owners at rest: a fresh state is the same as theirs."""
        index = int(now // WINDOW_SECONDS)
        resting = [
            name
            for name, s in self._tenants.items()
            if s.in_flight == 0 and now >= s.full_at and (s.window is None or s.window < index - 1)
        ]
        for name in resting:
            del self._tenants[name]
        self._sweep_at = max(MIN_SWEEP, 2 * len(self._tenants))

    def held(self) -> int:
        """How many owners have counters here (tests, and the bound's check)."""
        return len(self._tenants)

    def in_flight(self, tenant: str) -> int:
        state = self._tenants.get(tenant)
        return state.in_flight if state is not None else 0

    async def aclose(self) -> None:
        self._tenants.clear()
