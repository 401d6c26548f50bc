"""Circuit breakers: pybreaker's state machine and storage (memory, or Redis shared by replicas),
driven so that it is correct under asyncio.

pybreaker wraps synchronous calls. Here the outcome of an awaited call is recorded after the
fact through `calling()`, and two things pybreaker lacks are added: while half-open exactly one
trial call is let through (per process), and a success slower than `slow_call_seconds` counts as
a failure. Cancelled calls (the client left) and gateway bugs are recorded as neither.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

import pybreaker

from gateway.config import BreakerConfig, RedisTarget
from gateway.errors import GatewayError, ProviderMisconfigured
from gateway.resilience.shared_storage import SharedStorage
from gateway.state.health import RedisHealth
from gateway.state.redis import CONNECTIONS, Timeouts

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("gateway.breaker")


# Short: an unreachable Redis must not stall requests (the breakers then work on local state).
REDIS_TIMEOUTS = Timeouts(socket=0.25, connect=0.25)
CLOSED, OPEN, HALF_OPEN = pybreaker.STATE_CLOSED, pybreaker.STATE_OPEN, pybreaker.STATE_HALF_OPEN
STATE_VALUES = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}  # the metric's encoding


class BreakerOpen(Exception):
    """The breaker refused the call; nothing went over the network."""

    def __init__(self, name: str, retry_in: float | None) -> None:
        super().__init__(f"circuit breaker '{name}' is open")
        self.name = name
        self.retry_in = retry_in


def is_upstream_fault(exc: BaseException) -> bool | None:
    """True: counts against the upstream (5xx, 429, timeouts, broken connections). False: the
    upstream answered properly (a 4xx is the client's mistake). None: not the upstream's doing."""
    if isinstance(exc, ProviderMisconfigured):
        return None  # the gateway's configuration is wrong, not the upstream's health
    if isinstance(exc, GatewayError):
        if not getattr(exc, "blame_upstream", True):
            return None
        return exc.status >= 500 or exc.status == 429
    return None


class _Failure(Exception):
    """Raised inside pybreaker's `calling()` to record a failure."""


@dataclass(frozen=True, slots=True)
class BreakerState:
    name: str
    state: str
    failures: int
    opened_at: float | None  # unix time
    retry_in: float | None  # seconds until a trial is allowed, while open


class Breaker:
    def __init__(
        self,
        name: str,
        config: BreakerConfig,
        storage: pybreaker.CircuitBreakerStorage | None = None,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.name = name
        self._storage = storage or pybreaker.CircuitMemoryStorage(CLOSED)
        self._cb = pybreaker.CircuitBreaker(
            fail_max=config.failures,
            reset_timeout=config.reset_seconds,
            state_storage=self._storage,
            name=name,
            throw_new_error_on_trip=False,
            listeners=[_Transitions(on_change)],
        )
        self._slow_call = config.slow_call_seconds
        self._trial_in_flight = False

    def configure(self, config: BreakerConfig) -> None:
        """Apply new thresholds (config reload) without losing the state."""
        self._cb.fail_max = config.failures
        self._cb.reset_timeout = config.reset_seconds
        self._slow_call = config.slow_call_seconds

    @property
    def state(self) -> str:
        return self._storage.state

    def snapshot(self) -> BreakerState:
        state = self._storage.state
        opened = self._storage.opened_at if state != CLOSED else None
        return BreakerState(
            name=self.name,
            state=state,
            failures=self._storage.counter,
            opened_at=opened.timestamp() if opened else None,
            retry_in=self._retry_in(opened) if state == OPEN else None,
        )

    def may_try(self) -> bool:
        """Whether a call now would be let through (without claiming the trial)."""
        state = self._storage.state
        if state == CLOSED:
            return True
        if state == OPEN and self._retry_in(self._storage.opened_at) > 0:
            return False
        return not self._trial_in_flight

    def attempt(self) -> _Attempt:
        """Guard one call (`with breaker.attempt():`): raises BreakerOpen at once when the
        breaker refuses it, otherwise runs the block and records how it went."""
        return _Attempt(self)

    def record_failure(self) -> None:
        """A failure found after the guarded part ended (a stream that broke mid-way)."""
        self._record(failed=True)

    def reset(self) -> None:
        """Close it now (admin action)."""
        self._cb.close()

    def force_open(self) -> None:
        """Open it now (admin action), e.g. to drain a deployment."""
        self._cb.open()

    def _admit(self) -> bool:
        """Whether this call is the one trial call; raises BreakerOpen if it may not go."""
        state = self._storage.state
        if state == CLOSED:
            return False
        if state == OPEN:
            retry_in = self._retry_in(self._storage.opened_at)
            if retry_in > 0:
                raise BreakerOpen(self.name, retry_in)
        # Open and due for a trial, or half-open: one call at a time finds out.
        if self._trial_in_flight:
            raise BreakerOpen(self.name, None)
        self._trial_in_flight = True
        return True

    def _retry_in(self, opened_at: datetime | None) -> float:
        if opened_at is None:
            return 0.0
        elapsed = (datetime.now(UTC) - opened_at).total_seconds()
        return max(0.0, self._cb.reset_timeout - elapsed)

    def _record(self, *, failed: bool) -> None:
        if not failed and self._nothing_to_record():
            return
        try:
            with self._cb.calling():
                if failed:
                    raise _Failure
        except (_Failure, pybreaker.CircuitBreakerError):
            pass  # recorded; or opened meanwhile (by another call or replica)

    def _nothing_to_record(self) -> bool:
        """A success that changes nothing: closed, on this process's memory, no failure
        counted. pybreaker would take its lock, run a generator, set the zero counter to zero
        and tell listeners that ignore successes; most calls end here instead."""
        storage = self._storage
        return (
            type(storage) is pybreaker.CircuitMemoryStorage
            and storage.counter == 0
            and self._cb.state.name == CLOSED  # as pybreaker, notices a change made elsewhere
        )


class _Attempt:
    """One guarded call (`Breaker.attempt`): a plain context manager, as it runs per call."""

    __slots__ = ("_breaker", "_started", "_trial")

    def __init__(self, breaker: Breaker) -> None:
        self._breaker = breaker

    def __enter__(self) -> None:
        self._trial = self._breaker._admit()
        self._started = time.monotonic()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        breaker = self._breaker
        try:
            if exc is None:
                slow = breaker._slow_call
                breaker._record(failed=slow is not None and time.monotonic() - self._started > slow)
            else:
                fault = is_upstream_fault(exc)
                if fault is not None:
                    breaker._record(failed=fault)
        finally:
            if self._trial:
                breaker._trial_in_flight = False


class _Transitions(pybreaker.CircuitBreakerListener):
    """Logs each state change and reports it (name, new state) to `on_change`."""

    def __init__(self, on_change: Callable[[str, str], None] | None) -> None:
        self._on_change = on_change

    def state_change(
        self,
        cb: pybreaker.CircuitBreaker,
        old_state: pybreaker.CircuitBreakerState | None,
        new_state: pybreaker.CircuitBreakerState,
    ) -> None:
        old = old_state.name if old_state else None
        log.warning("circuit breaker %s: %s -> %s", cb.name, old, new_state.name)
        if self._on_change is not None and cb.name:
            self._on_change(cb.name, new_state.name)


class Breakers:
    """Every breaker of this process, by name. Outlives config reloads, so state survives them."""

    def __init__(
        self,
        config: BreakerConfig,
        storage: RedisTarget | None = None,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        """`storage`: where replicas share breaker state (None: in this process only)."""
        self._config = config
        self._on_change = on_change
        self._target = storage
        self._redis: Redis | None = None
        # meaningful with Redis storage only
        self.redis_health = RedisHealth(log, "circuit breaker storage", "breakers on local state")
        self._breakers: dict[str, Breaker] = {}
        self._own_config: set[str] = set()  # breakers with their own thresholds (retrievers)

    def get(self, name: str, config: BreakerConfig | None = None) -> Breaker:
        """The breaker called `name`; `config` gives it its own thresholds (applied again on
        every call, so a reload that changes them takes effect)."""
        breaker = self._breakers.get(name)
        if breaker is None:
            storage = self._storage(name)
            breaker = self._breakers[name] = Breaker(
                name, config or self._config, storage, self._on_change
            )
        elif config is not None:
            breaker.configure(config)
        if config is not None:
            self._own_config.add(name)
        return breaker

    def configure(self, config: BreakerConfig, storage: RedisTarget | None) -> None:
        """A reload: new thresholds apply to every default breaker; a storage change rebuilds
        them (their state lives in the old storage)."""
        if storage != self._target:
            self.close()
            self._target = storage
            self._breakers.clear()
            self._own_config.clear()
        self._config = config
        for name, breaker in self._breakers.items():
            if name not in self._own_config:
                breaker.configure(config)

    def close(self) -> None:
        redis, self._redis = self._redis, None
        if redis is not None:
            CONNECTIONS.release_sync(redis)

    def find(self, name: str) -> Breaker | None:
        return self._breakers.get(name)

    def snapshot(self) -> list[BreakerState]:
        return [self._breakers[name].snapshot() for name in sorted(self._breakers)]

    def __iter__(self) -> Iterator[Breaker]:
        return iter(list(self._breakers.values()))

    def _storage(self, name: str) -> pybreaker.CircuitBreakerStorage | None:
        target = self._target
        if target is None:
            return None
        if self._redis is None:
            self._redis = CONNECTIONS.sync_client(target.url, REDIS_TIMEOUTS)
        return SharedStorage(self._redis, f"{target.namespace}:{name}", self.redis_health)

    async def probe_redis(self) -> None:
        """With shared state: ask Redis now whether it answers, both ways (off the loop)."""
        if self._redis is not None:
            await asyncio.to_thread(self.redis_health.probe, self._redis)

    @property
    def shared(self) -> bool:
        """Whether breaker state is in Redis, shared with other replicas."""
        return self._target is not None

    @property
    def redis_up(self) -> bool:
        """With Redis storage, whether Redis answered lately (else breakers are local)."""
        return self.shared and self.redis_health.up
