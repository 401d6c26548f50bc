"""Verdicts and marks shared through a real redis-server: two ledgers are two replicas."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis

from gateway.cache.redis_store import RedisStore
from gateway.cache.service import SemanticCache
from gateway.cache.verify import ledger as memory_ledger
from gateway.cache.verify import redis_ledger
from gateway.cache.verify.estimate import Observation
from gateway.cache.verify.judge import Verdict
from gateway.cache.verify.ledger import Mark, window_key
from gateway.cache.verify.redis_ledger import RedisLedger
from gateway.cache.verify.verifier import Probe
from gateway.config import CachePolicy, ModelRoute
from gateway.config.cache import VerifyPolicy
from gateway.context import RequestContext
from gateway.embedding.embedder import HashEmbedder
from gateway.testing.harness.redis_server import RedisServer
from gateway.wire import chat_completion, usage
from tests.cache.entries import vector


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not shared in time"
        await asyncio.sleep(0.02)


def _verdict(similarity: float, agree: bool = True) -> Observation:
    return Observation(similarity, agree, 1.0, "served", time.time())


def _mark(entry: str, seed: int, ttl: float = 60.0, similarity: float = 0.96) -> Mark:
    return Mark(entry, vector(seed), similarity, time.time() + ttl)


def _similarities(ledger: RedisLedger, model: str) -> list[float]:
    return [o.similarity for o in ledger.observations(model)]


@pytest.fixture
def namespace() -> str:
    return f"test:{uuid.uuid4().hex[:8]}"  # each test its own keys on the shared server


@pytest.fixture
async def replicas(
    redis_url: str, namespace: str
) -> AsyncIterator[tuple[RedisLedger, RedisLedger]]:
    a, b = RedisLedger(redis_url, namespace), RedisLedger(redis_url, namespace)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_replicas_see_each_others_verdicts_and_marks(
    replicas: tuple[RedisLedger, RedisLedger],
) -> None:
    a, b = replicas
    assert a.synced and b.synced
    for s in (0.95, 0.96, 0.97):
        await a.record("m", _verdict(s))
    await b.record("m", _verdict(0.98, agree=False))
    await _until(lambda: len(b.observations("m")) == 4 and len(a.observations("m")) == 4)
    assert (
        sorted(_similarities(a, "m"))
        == sorted(_similarities(b, "m"))
        == [
            0.95,
            0.96,
            0.97,
            0.98,
        ]
    )
    assert [o.agree for o in b.observations("m")].count(False) == 1
    assert b.version("m") == 4  # the verifier's refresh reconsiders on this
    await a.mark(_mark("s:1", 7))
    await _until(lambda: bool(b.marks("s:1")))
    (seen,) = b.marks("s:1")
    assert seen.similarity == pytest.approx(0.96)
    assert np.allclose(seen.vector, vector(7))
    assert len(a.marks("s:1")) == 1  # its own mark is not applied twice
    assert b.marks("s:2") == ()


async def test_a_new_replica_starts_with_the_shared_state_and_counts_nothing_twice(
    redis_url: str, namespace: str, replicas: tuple[RedisLedger, RedisLedger]
) -> None:
    a, b = replicas
    for i in range(5):
        await (a if i % 2 else b).record("m", _verdict(0.95 + i / 100, agree=i != 3))
    await a.mark(_mark("s:1", 1))
    await b.mark(_mark("s:1", 2))
    late = RedisLedger(redis_url, namespace)
    await late.open()
    try:
        # loaded by `open`, before any event is followed
        assert sorted(_similarities(late, "m")) == pytest.approx([0.95, 0.96, 0.97, 0.98, 0.99])
        assert sum(not o.agree for o in late.observations("m")) == 1
        marks = late.marks("s:1")
        assert [m.similarity for m in marks] == pytest.approx([0.96, 0.96])
        assert sorted(tuple(m.vector) for m in marks) == sorted(
            tuple(vector(seed)) for seed in (1, 2)
        )
        await a.record("m", _verdict(0.90))
        await a.record("sentinel", _verdict(0.5))  # written after: once seen, so is 0.90
        await _until(lambda: bool(late.observations("sentinel")))
        assert len(late.observations("m")) == 6
        assert len(late.marks("s:1")) == 2
    finally:
        await late.close()


async def test_windows_are_capped_in_redis_and_in_memory(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_ledger, "WINDOW", 10)
    monkeypatch.setattr(redis_ledger, "WINDOW", 10)
    a, b = RedisLedger(redis_url, namespace), RedisLedger(redis_url, namespace)
    await a.open()
    await b.open()
    try:
        for i in range(25):
            await a.record("m", _verdict(i / 100))
        await _until(lambda: _similarities(b, "m")[-1:] == [0.24])
        newest = [i / 100 for i in range(15, 25)]
        assert _similarities(a, "m") == _similarities(b, "m") == newest
        client = aioredis.Redis.from_url(redis_url)
        assert await client.llen(f"{namespace}:verify:w:m") == 10
        await client.aclose()
        late = RedisLedger(redis_url, namespace)
        await late.open()
        assert _similarities(late, "m") == newest  # oldest first
        await late.close()
    finally:
        await a.close()
        await b.close()


async def test_marks_expire_with_their_entries(
    redis_url: str, replicas: tuple[RedisLedger, RedisLedger], namespace: str
) -> None:
    a, b = replicas
    await a.mark(_mark("s:short", 1, ttl=0.5))
    await a.mark(_mark("s:long", 2, ttl=600))
    await a.mark(_mark("s:gone", 3, ttl=-1))  # expired already: not shared at all
    await _until(lambda: bool(b.marks("s:short")) and bool(b.marks("s:long")))
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.exists(f"{namespace}:verify:m:s:gone") == 0
        assert 0 < await client.pttl(f"{namespace}:verify:m:s:long") <= 600_000
        # a later mark on the same entry with a later expiry moves the key's expiry out
        await a.mark(_mark("s:short", 4, ttl=900))
        assert await client.pttl(f"{namespace}:verify:m:s:short") > 600_000
        await a.mark(_mark("s:brief", 5, ttl=0.3))
        await _until(lambda: bool(b.marks("s:brief")))

        async def gone() -> bool:
            return not b.marks("s:brief") and not await client.exists(
                f"{namespace}:verify:m:s:brief"
            )

        deadline = time.monotonic() + 10
        while not await gone():
            assert time.monotonic() < deadline, "the mark outlived its entry"
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    assert len(b.marks("s:short")) >= 1 and len(b.marks("s:long")) == 1


async def test_foreign_or_damaged_data_under_the_keys_is_skipped(
    redis_url: str, namespace: str, replicas: tuple[RedisLedger, RedisLedger]
) -> None:
    a, b = replicas
    await a.record("m", _verdict(0.95))
    client = aioredis.Redis.from_url(redis_url)
    base = f"{namespace}:verify"
    try:
        await client.set(f"{base}:w:bad", "not a list")
        await client.sadd(f"{base}:models", "bad")
        await client.lpush(f"{base}:w:m", "junk", "1-1\nother\n[1, 2]", "9-9\nother\nnot json")
        await client.set(f"{base}:m:s:bad", "not a list")
        await client.lpush(f"{base}:m:s:short", "2-2\nother\nxx")  # too short for a mark
        await client.xadd(f"{base}:events", {"op": "v", "origin": "x", "payload": "[0.5]"})
        await client.xadd(
            f"{base}:events", {"op": "m", "origin": "x", "entry": "e", "payload": "z"}
        )
        await client.xadd(f"{base}:events", {"op": "?"})
    finally:
        await client.aclose()
    # the follower skips the damaged events and goes on
    await a.record("m", _verdict(0.96))
    await _until(lambda: _similarities(b, "m") == [0.95, 0.96])
    # a write Redis refuses (a foreign key in the way) does not raise, is kept here, and is
    # not retried forever: what comes after it is still shared
    await b.record("bad", _verdict(0.7))
    assert _similarities(b, "bad") == [0.7]
    await b.record("m", _verdict(0.97))
    await _until(lambda: _similarities(a, "m") == [0.95, 0.96, 0.97])
    late = RedisLedger(redis_url, namespace)
    await late.open()
    try:
        assert late.synced
        assert sorted(_similarities(late, "m")) == [0.95, 0.96, 0.97]
        assert late.marks("s:bad") == () and late.marks("s:short") == ()
    finally:
        await late.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


async def test_redis_away_costs_nothing_and_sharing_resumes_when_it_is_back(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.cache.verify")
    a, b = RedisLedger(own_redis.url, "outage"), RedisLedger(own_redis.url, "outage")
    await a.open()
    await b.open()
    try:
        await a.record("m", _verdict(0.95))
        await _until(lambda: len(b.observations("m")) == 1)
        own_redis.stop()
        # neither raises; each keeps what it recorded, and lookups read it
        await a.record("m", _verdict(0.96, agree=False))
        await a.mark(_mark("s:1", 1))
        await b.record("m", _verdict(0.97))
        assert _similarities(a, "m") == [0.95, 0.96]
        assert len(a.marks("s:1")) == 1
        assert _similarities(b, "m") == [0.95, 0.97]
        await _until(lambda: not a.synced and not b.synced)
        await a.record("m", _verdict(0.99))  # while the follower knows Redis is away
        for n in range(20):  # queued, Redis not even tried: no warning per verdict
            await b.record("burst", _verdict(n / 100))
        warned = [r.getMessage() for r in caplog.records if r.name == "gateway.cache.verify"]
        # 24 verdicts and a mark kept here: at most a "write failed" (before the follower
        # noticed) and a "lost Redis" warning from each replica, throttled
        assert 2 <= len(warned) <= 4
        assert sum("lost Redis" in m for m in warned) == 2
        own_redis.start()  # empty: a Redis without persistence lost everything
        # what each kept meanwhile reaches the other once Redis is back
        await _until(lambda: len(b.observations("m")) == 4 and len(a.observations("m")) == 4)
        assert sorted(_similarities(b, "m")) == sorted(_similarities(a, "m"))
        assert sorted(_similarities(a, "m")) == [0.95, 0.96, 0.97, 0.99]
        await _until(lambda: bool(b.marks("s:1")))
        await _until(lambda: len(a.observations("burst")) == 20)
        assert a.synced and b.synced
        await b.record("m", _verdict(0.5))
        await _until(lambda: len(a.observations("m")) == 5)
        # and the restarted Redis holds them again, for a replica starting now
        late = RedisLedger(own_redis.url, "outage")
        await late.open()
        assert len(late.observations("m")) == 4  # 0.95 was written before the restart
        assert len(late.marks("s:1")) == 1
        await late.close()
    finally:
        await a.close()
        await b.close()


# --- two caches on one Redis: a verdict through one refuses the entry on the other -----------

STORED = "How do I reset my password?"
ASKED = "How do I reset my password please?"


def _answer(text: str) -> dict[str, Any]:
    return chat_completion("m", {"role": "assistant", "content": text}, "stop", usage(9, 3))


def _route() -> ModelRoute:
    policy = CachePolicy(
        enabled=True, similarity_threshold=0.6, verify=VerifyPolicy(sample_rate=1.0)
    )
    return ModelRoute("m", "p", "m", "chat", policy)


async def _ask(cache: SemanticCache, text: str, route: ModelRoute) -> Any:
    ctx = RequestContext(request_id="r", endpoint="chat", tenant="t")
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    plan = cache.plan(ctx, route, body, "default")
    assert plan is not None
    return ctx, plan, await cache.lookup(ctx, plan)


def _cache(url: str, namespace: str) -> SemanticCache:
    store = RedisStore(url, namespace, max_entries=100, approximate_above=1000)
    return SemanticCache(store, HashEmbedder(), ledger=RedisLedger(url, namespace))


async def test_a_wrong_verdict_on_one_replica_refuses_the_entry_on_the_other(
    redis_url: str, namespace: str
) -> None:
    one, other = _cache(redis_url, namespace), _cache(redis_url, namespace)
    for cache in (one, other):
        await cache.start()
        await cache.wait_ready()
    route = _route()
    try:
        ctx, plan, hit = await _ask(one, STORED, route)
        assert hit is None
        one.keep(ctx, plan, _answer("Use the link on the sign-in page."))
        await one.flush()
        found: list[Any] = []

        async def served_by_other() -> bool:
            ctx, plan, hit = await _ask(other, ASKED, route)
            found[:] = [ctx, plan, hit]
            return hit is not None and hit.kind == "hit-semantic"

        deadline = time.monotonic() + 10
        while not await served_by_other():
            assert time.monotonic() < deadline, "the entry did not reach the other replica"
            await asyncio.sleep(0.02)
        ctx, plan, hit = found
        assert (
            other.verifier.refusal("m", plan.policy, hit.entry, hit.similarity, ctx.embedding)
            is None
        )
        probe = Probe(
            "m", plan.policy, hit.entry, hit.similarity, ASKED, ctx.embedding, 1.0, "served", "t"
        )
        await one.verifier.record(probe, Verdict(False, "different"))

        def refused() -> bool:
            reason = other.verifier.refusal(
                "m", plan.policy, hit.entry, hit.similarity, ctx.embedding
            )
            return reason == "verified-wrong"

        await _until(refused)
        again, _, _ = await _ask(other, ASKED, route)
        assert again.cache_result == "miss" and again.cache_near_miss == "verified-wrong"
        assert [o.agree for o in other.verifier.ledger.observations(window_key("t", "m"))] == [
            False
        ]
    finally:
        await one.close()
        await other.close()
