"""Rate limits on the real clock, through real gateway processes over HTTP.

One process with in-memory counters: a token bucket of R requests/s and burst B admits
B + R*T requests in T seconds of clients sending as fast as they can (within 10%). Then two
processes sharing a real redis-server (`rate_limits.storage: redis`): one budget for both,
not one each (requests per second and concurrent requests), and a policy's `rate_limit` for
one tenant is what both enforce.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.starters import listening, spawn_gateway
from tests.e2e.helpers import assert_openai_error, request
from tests.resilience.test_redis_breakers import ADMIN_ENV, ADMIN_KEY

TENANTS = ["fast", "shared", "slots", "plain", "gold", "platinum"]
KEYS = {f"RLS_KEY_{t.upper()}": f"sk-rls-{t}" for t in TENANTS}
SLOW_MS = 1500  # the `slow` model's upstream latency: requests stay in flight this long


def key(tenant: str) -> str:
    return f"sk-rls-{tenant}"


def config(fake_url: str, rate_limits: Json) -> Json:
    timeouts = {"connect": 2, "read": 10, "total": 10}
    return {
        "server": {"access_log": False, "watch_config": False},
        "auth": {
            "admin_key_env": "GATEWAY_ADMIN_KEY",
            "keys": [{"env": env, "tenant": env[8:].lower()} for env in KEYS],
        },
        "providers": {"fake": {"type": "openai", "base_url": fake_url, "timeouts": timeouts}},
        "models": [
            {"name": "quick", "provider": "fake", "upstream_model": "up-quick"},
            {"name": "slow", "provider": "fake", "upstream_model": "up-slow"},
        ],
        "cache": {
            "store": {"type": "memory"},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": False},
        },
        "resilience": {"retry": {"attempts": 1}, "breaker": {"failures": 1000}},
        "rate_limits": rate_limits,
    }


@contextmanager
def gateways(
    tmp_path: Path, data: Json, count: int, policies: dict[str, Json] | None = None
) -> Iterator[list[str]]:
    """`count` gateway processes on one config (and its policies/): their URLs."""
    path = write_config(tmp_path, data, policies)
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                spawn_gateway(tmp_path, path, name=f"gateway-{i}", env={**ADMIN_ENV, **KEYS})
            )
            for i in range(count)
        ]
        yield [listening(server, 20).url for server in started]


# --- hammering ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    gateway: str
    sent: float  # seconds since the run started
    status: int
    headers: dict[str, str]
    body: bytes


def body_for(model: str, text: str = "hi") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


async def post(session: aiohttp.ClientSession, url: str, tenant: str, model: str) -> Reply:
    headers = {"Authorization": f"Bearer {key(tenant)}"}
    async with session.post(
        url + "/v1/chat/completions", json=body_for(model), headers=headers
    ) as resp:
        return Reply(url, 0.0, resp.status, dict(resp.headers), await resp.read())


def hammer(urls: list[str], tenant: str, seconds: float, per_gateway: int = 3) -> list[Reply]:
    """Clients sending one request after another, as fast as they are answered, for
    `seconds` (measured from the first send) to every gateway in `urls`."""

    async def run() -> list[Reply]:
        replies: list[Reply] = []
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.monotonic()

            async def client(url: str) -> None:
                while (sent := time.monotonic() - start) < seconds:
                    reply = await post(session, url, tenant, "quick")
                    replies.append(Reply(url, sent, reply.status, reply.headers, reply.body))

            await asyncio.gather(*(client(u) for u in urls for _ in range(per_gateway)))
        return replies

    return asyncio.run(run())


def admitted(replies: list[Reply]) -> int:
    """The 200s; everything else must be a well-formed 429 of the requests-per-second limit."""
    for reply in replies:
        if reply.status != 200:
            check_429(reply, "requests per second")
        else:
            assert json.loads(reply.body)["choices"][0]["message"]["content"] == "Echo: hi"
    return sum(1 for r in replies if r.status == 200)


def check_429(reply: Reply, limit: str) -> None:
    error = assert_openai_error(
        reply.status, reply.headers, reply.body, expected_status=429, code="rate_limit_exceeded"
    )
    assert limit in error["message"], error
    assert int(reply.headers["Retry-After"]) >= 1, reply.headers


def within_10_percent(got: int, expected: float) -> bool:
    return abs(got - expected) <= 0.1 * expected


# --- (a) one process, memory: the bucket's accuracy -----------------------------------------


def test_the_token_bucket_holds_its_rate_through_the_gateway(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    rate, burst, seconds = 20, 10, 3.5
    limits = {
        "storage": {"type": "memory"},
        "tenants": {"fast": {"requests_per_second": rate, "burst": burst}},
    }
    with gateways(tmp_path, config(fake_upstream.url, limits), 1) as urls:
        replies = hammer(urls, "fast", seconds, per_gateway=4)
    expected = burst + rate * seconds
    got = admitted(replies)
    assert len(replies) > 5 * expected, f"the clients sent only {len(replies)} requests"
    assert within_10_percent(got, expected), f"admitted {got}, expected {expected:g} +-10%"
    early = sum(1 for r in replies if r.status == 200 and r.sent < 0.25)
    assert early >= burst, f"the burst of {burst} is admitted at once (got {early} in 0.25 s)"
    late = sum(1 for r in replies if r.status == 200 and r.sent >= 1.0)
    assert within_10_percent(late, rate * (seconds - 1)), f"{late} admitted after the burst"


# --- (b), (c) two processes sharing Redis ---------------------------------------------------

GOLD = {
    "description": "gold gets a bigger burst than config.yaml's default",
    "match": {"tenants": ["gold"]},
    "rate_limits": {"requests_per_second": 0.1, "burst": 4},
}
PLATINUM = {
    "description": "platinum is limited by its request rate only",
    "match": {"tenants": ["platinum"]},
    "rate_limits": {"requests_per_second": 1000},
}


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, fake: FakeUpstream
) -> Iterator[list[str]]:
    """Two gateway processes, one config, one Redis namespace."""
    namespace = f"rls-{uuid.uuid4().hex[:12]}"  # this module's own keys in the session's Redis
    limits = {
        "storage": {"type": "redis"},
        "default": {"requests_per_second": 0.1, "burst": 1, "concurrent": 1},
        "tenants": {"shared": {"requests_per_second": 20, "burst": 10}, "slots": {"concurrent": 4}},
    }
    data = {**config(fake.url, limits), "redis": {"url": redis_url, "namespace": namespace}}
    policies = {"gold": GOLD, "platinum": PLATINUM}
    with gateways(tmp_path_factory.mktemp("pair"), data, 2, policies) as urls:
        yield urls


def test_two_processes_share_one_token_bucket(pair: list[str], fake_upstream: FakeUpstream) -> None:
    rate, burst, seconds = 20, 10, 3.0
    replies = hammer(pair, "shared", seconds, per_gateway=3)
    expected = burst + rate * seconds
    got = admitted(replies)
    per_gateway = {
        url: sum(1 for r in replies if r.gateway == url and r.status == 200) for url in pair
    }
    # One bucket for both: never the twice as many two separate buckets would admit. As many
    # as it allows, unless a loaded machine answered too slowly for the clients to ask that
    # many (then every request they managed to send within the limit is admitted).
    wanted = min(expected, len(replies))
    assert got <= expected * 1.1 and got >= wanted * 0.9, (
        f"admitted {got} of {len(replies)} across both ({per_gateway}), expected "
        f"{expected:g} +-10% (each process alone would admit about {2 * expected:g} together)"
    )
    assert all(per_gateway.values()), f"both processes admitted some: {per_gateway}"


def test_two_processes_share_the_concurrent_slots(
    pair: list[str], fake_upstream: FakeUpstream
) -> None:
    """`slots` may have 4 requests in flight, wherever they run."""
    fake_upstream.per_model["up-slow"] = Knobs(latency_ms=SLOW_MS)
    a, b = pair

    async def run() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            # Twelve at once, six through each process: four get a slot, eight are refused.
            wave = await asyncio.gather(
                *(post(session, url, "slots", "slow") for url in [a, b] * 6)
            )
            statuses = sorted(r.status for r in wave)
            assert statuses == [200] * 4 + [429] * 8, statuses
            for reply in wave:
                if reply.status == 429:
                    check_429(reply, "concurrent requests")

            # Two in flight through each; a fifth is refused by either process.
            held = [
                asyncio.ensure_future(post(session, url, "slots", "slow")) for url in [a, a, b, b]
            ]
            deadline = time.monotonic() + SLOW_MS / 1000 - 0.5
            while fake_upstream.stats["in_flight"] < 4:
                assert time.monotonic() < deadline, "the four requests did not reach the upstream"
                await asyncio.sleep(0.01)
            for url in (a, b):
                check_429(await post(session, url, "slots", "quick"), "concurrent requests")
            assert [r.status for r in await asyncio.gather(*held)] == [200] * 4
            # The slots were given back, through whichever process held them.
            assert (await post(session, b, "slots", "quick")).status == 200
            assert (await post(session, a, "slots", "quick")).status == 200

    asyncio.run(run())


def sequence(urls: list[str], tenant: str) -> list[int]:
    """One request after another to each URL in turn."""

    async def run() -> list[int]:
        async with aiohttp.ClientSession() as session:
            return [(await post(session, url, tenant, "quick")).status for url in urls]

    return asyncio.run(run())


def effective_rate_limit(url: str, tenant: str) -> dict[str, Any]:
    query = f"/admin/policies?tenant={tenant}&model="
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = asyncio.run(request("GET", url + query, headers=headers))
    assert resp.status == 200, resp.text
    limits: dict[str, Any] = resp.json()["effective"]["rate_limits"]
    return limits


def test_a_policy_rate_limit_overrides_the_default_in_both_processes(
    pair: list[str], fake_upstream: FakeUpstream
) -> None:
    a, b = pair
    # config.yaml's default: a bucket of 1 (0.1/s: nothing refills during the test), shared.
    assert sequence([a, b, a], "plain") == [200, 429, 429]
    # gold's policy: a bucket of 4, shared by both processes.
    assert sequence([a, b, a, b, a, b], "gold") == [200] * 4 + [429] * 2
    for url in pair:
        limits = effective_rate_limit(url, "gold")
        assert limits["burst"] == 4 and limits["requests_per_second"] == 0.1, limits
        assert effective_rate_limit(url, "plain")["burst"] == 1


def test_a_policy_rate_limit_changes_only_the_fields_it_sets(
    pair: list[str], fake_upstream: FakeUpstream
) -> None:
    """platinum's policy sets only `requests_per_second: 1000`. Like every policy section
    (docs/POLICIES.md), it overlays config.yaml's limits for the tenant field by field: the
    default's concurrency limit of 1 still holds, in both processes."""
    fake_upstream.per_model["up-slow"] = Knobs(latency_ms=400)

    async def two_at_once() -> list[int]:
        async with aiohttp.ClientSession() as session:
            replies = await asyncio.gather(
                *(post(session, url, "platinum", "slow") for url in pair)
            )
            return [r.status for r in replies]

    limits = effective_rate_limit(pair[0], "platinum")
    statuses = asyncio.run(two_at_once())
    merged = {"requests_per_second": 1000.0, "burst": 1, "concurrent": 1}
    assert limits == {**merged, "tokens_per_minute": None}
    assert sorted(statuses) == [200, 429], f"two at once through the two processes: {statuses}"
