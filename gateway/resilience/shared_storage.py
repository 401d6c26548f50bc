"""Breaker state shared through Redis, with this process's memory as the fallback.

Replicas read and write one state per breaker in Redis (pybreaker's key layout, so a breaker
opened by one replica refuses calls on all of them). While Redis is unreachable each replica
keeps its breakers working on local state, seeded with the last state it read from Redis:
a failing provider is still cut off (per replica) instead of every breaker reading closed.
After a failure Redis is left alone for a second, so an outage costs no latency; once it
answers again the shared state is authoritative again.

pybreaker's own CircuitRedisStorage swallows Redis errors and falls back to "closed"; this
storage is built on the same `CircuitBreakerStorage` interface instead.

The client is synchronous (pybreaker's storage interface is), so each call holds the event
loop for a Redis round trip. A breaker reads its state twice per request and resets its
failure counter after every success; read as it is, that was three round trips a request
(a quarter of one replica's throughput, docs/BENCHMARKS.md "Scale-out"). So the state read is
kept for `STATE_SECONDS` (another replica's change arrives that much later) and a counter
already reset is not reset again until a failure is counted.
"""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

import pybreaker
from redis.exceptions import RedisError

from gateway.state.health import RedisHealth

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("gateway.breaker")
T = TypeVar("T")
STATE_SECONDS = 0.1


class SharedStorage(pybreaker.CircuitBreakerStorage):
    def __init__(self, redis: Redis, namespace: str, health: RedisHealth) -> None:
        super().__init__("redis")
        self._redis = redis
        self._prefix = f"pybreaker:{namespace}:"
        self._health = health
        self._local = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self._state_read: tuple[float, str] | None = None  # (when, state) of the last read
        self._counter_reset = False  # reset by us, and no failure counted since

    def _shared(self, remote: Callable[[], T], local: Callable[[], T]) -> T:
        if self._health.paused():
            return local()
        try:
            result = remote()
        except (RedisError, OSError) as err:
            self._health.failed(err)
            return local()
        self._health.ok()
        return result

    def _key(self, name: str) -> str:
        return self._prefix + name

    @property
    def state(self) -> str:
        read = self._state_read
        if read is not None and time.monotonic() - read[0] < STATE_SECONDS:
            return read[1]

        def remote() -> str:
            raw = self._redis.get(self._key("state"))
            if raw is None:  # a new breaker, or a Redis that lost its data
                self._redis.setnx(self._key("state"), pybreaker.STATE_CLOSED)
                return pybreaker.STATE_CLOSED
            state = raw.decode() if isinstance(raw, bytes) else str(raw)
            self._local.state = state  # the seed should Redis go away
            self._state_read = (time.monotonic(), state)
            return state

        return self._shared(remote, lambda: self._local.state)

    @state.setter
    def state(self, state: str) -> None:
        self._local.state = state
        self._state_read = (time.monotonic(), state)
        self._shared(lambda: self._redis.set(self._key("state"), state), lambda: None)

    def increment_counter(self) -> None:
        self._local.increment_counter()
        self._counter_reset = False
        self._shared(lambda: self._redis.incr(self._key("fail_counter")), lambda: None)

    def reset_counter(self) -> None:
        self._local.reset_counter()
        if self._counter_reset:  # nothing counted here since: at most others' failures
            return
        self._counter_reset = True
        self._shared(lambda: self._redis.set(self._key("fail_counter"), 0), lambda: None)

    def increment_success_counter(self) -> None:
        self._local.increment_success_counter()
        self._shared(lambda: self._redis.incr(self._key("success_counter")), lambda: None)

    def reset_success_counter(self) -> None:
        self._local.reset_success_counter()
        self._shared(lambda: self._redis.set(self._key("success_counter"), 0), lambda: None)

    @property
    def counter(self) -> int:
        return self._shared(
            lambda: _int(self._redis.get(self._key("fail_counter"))), lambda: self._local.counter
        )

    @property
    def success_counter(self) -> int:
        return self._shared(
            lambda: _int(self._redis.get(self._key("success_counter"))),
            lambda: self._local.success_counter,
        )

    @property
    def opened_at(self) -> datetime | None:
        def remote() -> datetime | None:
            raw = self._redis.get(self._key("opened_at"))
            return datetime.fromtimestamp(int(raw), UTC) if raw else None

        return self._shared(remote, lambda: self._local.opened_at)

    @opened_at.setter
    def opened_at(self, now: datetime) -> None:
        self._local.opened_at = now
        seconds = calendar.timegm(now.timetuple())
        self._shared(lambda: self._redis.set(self._key("opened_at"), seconds), lambda: None)


def _int(raw: bytes | str | None) -> int:
    return int(raw) if raw else 0
