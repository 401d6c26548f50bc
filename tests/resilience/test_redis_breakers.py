"""Circuit-breaker state shared through a real Redis (`breaker_storage: {type: redis}`).

First two `Breakers` in one process, standing for two replicas; then two real gateway
processes (`python -m gateway serve`) in front of the shared fake upstream: a breaker opened by
failures seen by one is open in the other, which answers at level 4 without calling the
upstream, and an admin reset through the second closes it for the first.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from gateway.config import BreakerConfig, RedisTarget
from gateway.errors import UpstreamError
from gateway.resilience.breaker import CLOSED, OPEN, BreakerOpen, Breakers
from gateway.resilience.shared_storage import STATE_SECONDS
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.process import free_port
from gateway.testing.harness.starters import listening, spawn_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import request, upstream_requests

ADMIN_KEY = "admin-key-for-the-redis-breaker-test"
ADMIN_ENV = {"GATEWAY_ADMIN_KEY": ADMIN_KEY}  # for gateway processes whose config names it
NAME = "fake/lonely-up"  # <provider>/<upstream_model>


def unique_namespace(prefix: str) -> str:
    """Each test its own keys in the session's Redis."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- two replicas in one process ------------------------------------------------------------


@pytest.fixture
def replicas(redis_url: str) -> Iterator[tuple[Breakers, Breakers]]:
    storage = RedisTarget(redis_url, unique_namespace("unit"))
    config = BreakerConfig(failures=2, reset_seconds=30)
    pair = Breakers(config, storage), Breakers(config, storage)
    yield pair
    for breakers in pair:
        breakers.close()  # gives the shared connection pool back


def fail(breakers: Breakers) -> None:
    with pytest.raises(UpstreamError), breakers.get(NAME).attempt():
        raise UpstreamError("boom")


def test_failures_through_one_replica_open_the_breaker_for_the_other(
    replicas: tuple[Breakers, Breakers],
) -> None:
    one, other = replicas
    fail(one)
    assert other.get(NAME).snapshot().failures == 1, "the failure count is shared too"
    fail(one)
    assert one.get(NAME).state == OPEN
    time.sleep(STATE_SECONDS)  # a replica reads the shared state at most this stale
    seen = other.get(NAME).snapshot()
    assert seen.state == OPEN and seen.failures == 2
    assert seen.retry_in is not None and 28 <= seen.retry_in <= 30

    ran = False
    with pytest.raises(BreakerOpen) as refused, other.get(NAME).attempt():
        ran = True
    assert not ran, "an open breaker does not run the block"
    assert refused.value.name == NAME

    other.get(NAME).reset()
    time.sleep(STATE_SECONDS)
    assert one.get(NAME).state == CLOSED
    assert one.get(NAME).snapshot().failures == 0
    with one.get(NAME).attempt():
        ran = True
    assert ran


def test_failures_counted_by_both_replicas_add_up(replicas: tuple[Breakers, Breakers]) -> None:
    one, other = replicas
    fail(one)
    fail(other)
    time.sleep(STATE_SECONDS)
    assert one.get(NAME).state == OPEN and other.get(NAME).state == OPEN


def test_an_unreachable_redis_leaves_the_breakers_closed() -> None:
    """What the storage promises: Redis down is not an outage of the gateway. Making a breaker
    (at start-up, for every deployment) must not fail either."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    breakers = Breakers(BreakerConfig(failures=1), RedisTarget(url, "gateway"))
    breaker = breakers.get(NAME)
    assert breaker.state == CLOSED
    ran = False
    with breaker.attempt():
        ran = True
    assert ran
    assert not breakers.redis_up
    breakers.close()


# --- two gateway processes -------------------------------------------------------------------


def config(fake_url: str, redis_url: str) -> Json:
    timeouts = {"connect": 1, "read": 5, "total": 5}
    return {
        "server": {"access_log": False},
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY"},
        "providers": {"fake": {"type": "openai", "base_url": fake_url, "timeouts": timeouts}},
        "models": [{"name": "lonely", "provider": "fake", "upstream_model": "lonely-up"}],
        "cache": {"store": {"type": "memory"}, "defaults": {"enabled": False}},
        "resilience": {
            "retry": {"attempts": 1},
            "breaker": {"failures": 2, "reset_seconds": 30},
            "breaker_storage": {"type": "redis"},
        },
        "redis": {"url": redis_url, "namespace": unique_namespace("e2e")},
        "degradation": {"unavailable": {"mode": "answer"}},
    }


@pytest.fixture
def two_gateways(
    tmp_path: Path, redis_url: str, fake_upstream: FakeUpstream
) -> Iterator[tuple[str, str]]:
    """Two gateway processes with one config: the same Redis, the same namespace."""
    path = write_config(tmp_path, config(fake_upstream.url, redis_url))
    with ExitStack() as stack:
        started = [
            stack.enter_context(spawn_gateway(tmp_path, path, name=name, env=ADMIN_ENV))
            for name in ("a", "b")
        ]
        a, b = (listening(server, 20).url for server in started)
        yield a, b


def ask(gateway: str, text: str = "hello") -> Any:
    return sdk_client(gateway, "k", 10).chat.completions.with_raw_response.create(
        model="lonely", messages=[{"role": "user", "content": text}]
    )


def calls(fake: FakeUpstream) -> int:
    return sum(1 for r in upstream_requests(fake) if r["body"].get("model") == "lonely-up")


def admin(gateway: str, path: str, method: str = "GET") -> Any:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = asyncio.run(request(method, gateway + path, headers=headers))
    assert resp.status == 200, resp.text
    return resp.json()


def breaker(gateway: str) -> dict[str, Any]:
    states: list[dict[str, Any]] = admin(gateway, "/admin/breakers")["breakers"]
    return next(b for b in states if b["name"] == NAME)


def test_a_breaker_opened_by_one_gateway_process_is_open_in_another(
    two_gateways: tuple[str, str], fake_upstream: FakeUpstream
) -> None:
    a, b = two_gateways
    fake_upstream.per_model["lonely-up"] = Knobs(status=500)
    for sent in (1, 2):  # failures: 2, one attempt per request
        raw = ask(a)
        assert raw.status_code == 200
        assert raw.headers["x-gateway-level"] == "4"
        assert calls(fake_upstream) == sent
    assert breaker(a)["state"] == "open"
    time.sleep(STATE_SECONDS)  # B may have read the state this recently

    before = calls(fake_upstream)
    raw = ask(b)
    assert raw.status_code == 200
    assert raw.headers["x-gateway-level"] == "4"
    assert raw.headers["x-gateway-degraded"] == "unavailable"
    assert 1 <= int(raw.headers["retry-after"]) <= 30, "when the shared breaker allows a trial"
    assert calls(fake_upstream) == before, "B refused without a network call"
    seen = breaker(b)
    assert seen["state"] == "open" and seen["failures"] == 2, seen
    assert 28 <= seen["retry_in"] <= 30, seen

    assert admin(b, f"/admin/breakers/{NAME}/reset", method="POST")["state"] == "closed"
    fake_upstream.per_model.clear()
    time.sleep(STATE_SECONDS)
    raw = ask(a, "back again")
    assert "x-gateway-level" not in raw.headers
    assert raw.parse().choices[0].message.content == "Echo: back again"
    assert calls(fake_upstream) == before + 1, "A called the upstream again"
    assert breaker(a)["state"] == "closed"
