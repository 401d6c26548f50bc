"""Breaker state in Redis with local failover: shared while Redis answers, per process while
it does not, shared again once it is back."""

from __future__ import annotations

import time
import uuid

import pytest

from gateway.config import BreakerConfig, RedisTarget
from gateway.resilience.breaker import Breakers
from gateway.state.health import PAUSE_AFTER_FAILURE
from gateway.testing.harness.redis_server import redis_server, redis_server_path

CONFIG = BreakerConfig(failures=2, reset_seconds=30)


def _breakers(url: str, namespace: str) -> Breakers:
    return Breakers(CONFIG, RedisTarget(url, namespace))


def _fail(breakers: Breakers, name: str, times: int) -> None:
    for _ in range(times):
        breakers.get(name).record_failure()


def test_an_open_breaker_is_seen_by_the_other_replica(redis_url: str) -> None:
    namespace = f"t{uuid.uuid4().hex[:8]}"
    a, b = _breakers(redis_url, namespace), _breakers(redis_url, namespace)
    _fail(a, "p/m", 2)
    assert b.get("p/m").state == "open"
    assert a.redis_health.up and b.redis_health.up
    a.close()
    b.close()


def test_redis_away_keeps_breakers_working_locally_then_shares_again() -> None:
    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH")
    with redis_server() as server:
        url = server.url
        breakers = _breakers(url, "outage")
        breaker = breakers.get("p/m")
        assert breaker.state == "closed"
    # Redis is gone: failures still open the breaker, on this process's state.
    _fail(breakers, "p/m", 2)
    assert not breakers.redis_health.up
    assert breaker.state == "open"
    breakers.close()


def test_the_last_shared_state_seeds_the_local_one(redis_url: str) -> None:
    namespace = f"t{uuid.uuid4().hex[:8]}"
    a = _breakers(redis_url, namespace)
    _fail(a, "p/m", 2)
    assert a.get("p/m").state == "open"
    a.redis_health.failed(ConnectionError("simulated"))  # Redis "away" for a second
    assert a.get("p/m").state == "open"
    time.sleep(PAUSE_AFTER_FAILURE + 0.05)
    a.get("p/m").reset()  # Redis answers again: the reset is shared
    assert a.redis_health.up
    b = _breakers(redis_url, namespace)
    assert b.get("p/m").state == "closed"
    a.close()
    b.close()
