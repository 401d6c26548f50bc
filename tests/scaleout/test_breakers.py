"""Circuit breakers shared by three replicas through one Redis
(`resilience.breaker_storage: {type: redis}`).

A provider failing behind replica 1 opens its breaker; replicas 2 and 3 then refuse the
model without sending the upstream a single request (the fake counts them), and each one's
/admin/breakers shows it open. Failures seen by different replicas add up, and an admin
reset through one replica closes the breaker for all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from gateway.resilience.shared_storage import STATE_SECONDS
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from tests.scaleout.cluster import (
    Answer,
    Replica,
    ready_replicas,
    upstream_calls,
)
from tests.scaleout.cluster import base_config as base

FAILURES, RESET_SECONDS = 3, 30
FLAKY, STEADY = "fake/up-flaky", "fake/up-steady"  # breaker names: provider/upstream_model


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, fake: FakeUpstream
) -> Iterator[list[Replica]]:
    namespace = f"so-breakers-{uuid.uuid4().hex[:12]}"
    config = base(
        fake.url,
        models=[
            {"name": "flaky", "provider": "fake", "upstream_model": "up-flaky"},
            {"name": "steady", "provider": "fake", "upstream_model": "up-steady"},
        ],
        redis={"url": redis_url, "namespace": namespace},
        resilience={
            "retry": {"attempts": 1},
            "breaker": {"failures": FAILURES, "reset_seconds": RESET_SECONDS},
            "breaker_storage": {"type": "redis"},
        },
        degradation={"unavailable": {"mode": "answer"}},
    )
    yield from ready_replicas(tmp_path_factory, "breakers", config)


@pytest.fixture
def three(cluster: list[Replica], fake_upstream: FakeUpstream) -> list[Replica]:
    """The replicas with every breaker closed (reset through replica 1)."""
    for name in (FLAKY, STEADY):
        assert cluster[0].admin(f"/admin/breakers/{name}/reset", "POST")["state"] == "closed"
    return cluster


def assert_unavailable(answer: Answer, where: str) -> None:
    """The level-4 answer (mode: answer) a refused or failed request gets."""
    assert answer.headers.get("x-gateway-level") == "4", f"{where}: {answer.headers}"
    assert answer.headers.get("x-gateway-degraded") == "unavailable", f"{where}: {answer.headers}"


def test_a_breaker_opened_behind_one_replica_makes_the_others_refuse_without_a_request(
    three: list[Replica], fake_upstream: FakeUpstream
) -> None:
    r1, r2, r3 = three
    fake_upstream.per_model["up-flaky"] = Knobs(status=500)
    for sent in range(1, FAILURES + 1):  # one attempt per request, each a failure
        assert_unavailable(r1.ask("hello", model="flaky"), "replica 1")
        assert upstream_calls(fake_upstream, "up-flaky") == sent
    assert r1.breaker(FLAKY)["state"] == "open"

    for replica in (r2, r3):
        for _ in range(2):
            answer = replica.ask("hello", model="flaky")
            assert_unavailable(answer, replica.name)
            assert 1 <= int(answer.headers["retry-after"]) <= RESET_SECONDS, answer.headers
    assert upstream_calls(fake_upstream, "up-flaky") == FAILURES, (
        "replicas 2 and 3 refused without sending the upstream a request"
    )
    for replica in three:
        seen = replica.breaker(FLAKY)
        assert seen["state"] == "open" and seen["failures"] == FAILURES, (replica.name, seen)
        assert RESET_SECONDS - 5 <= seen["retry_in"] <= RESET_SECONDS, (replica.name, seen)
        # One deployment's breaker, not the provider's: the other model still answers.
        steady = replica.ask("still there?", model="steady")
        assert steady.content == "Echo: still there?" and "x-gateway-level" not in steady.headers
        assert replica.breaker(STEADY)["state"] == "closed"
    assert upstream_calls(fake_upstream, "up-steady") == 3


def test_failures_through_different_replicas_add_up_and_a_reset_through_one_closes_all(
    three: list[Replica], fake_upstream: FakeUpstream
) -> None:
    r1, r3 = three[0], three[2]
    fake_upstream.per_model["up-flaky"] = Knobs(status=500)
    for sent, replica in enumerate(three, start=1):  # one failure through each replica
        assert_unavailable(replica.ask("hello", model="flaky"), replica.name)
        assert upstream_calls(fake_upstream, "up-flaky") == sent
        expected = "open" if sent == FAILURES else "closed"
        time.sleep(STATE_SECONDS)  # a replica reads the shared state at most this stale
        assert [r.breaker(FLAKY)["state"] for r in three] == [expected] * 3
        assert {r.breaker(FLAKY)["failures"] for r in three} == {sent}
    assert_unavailable(r1.ask("hello", model="flaky"), "replica 1")
    assert upstream_calls(fake_upstream, "up-flaky") == FAILURES

    fake_upstream.per_model.clear()  # the provider recovers; an operator resets the breaker
    assert r3.admin(f"/admin/breakers/{FLAKY}/reset", "POST")["state"] == "closed"
    time.sleep(STATE_SECONDS)
    for sent, replica in enumerate(three, start=FAILURES + 1):
        answer = replica.ask("back again", model="flaky")
        assert answer.content == "Echo: back again" and "x-gateway-level" not in answer.headers
        assert upstream_calls(fake_upstream, "up-flaky") == sent
        assert replica.breaker(FLAKY)["state"] == "closed"
