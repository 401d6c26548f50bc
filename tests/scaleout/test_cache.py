"""The cache shared by three replicas through one Redis (`cache.store: {type: redis}`), with
the real MiniLM embedder in each replica.

The exact tier reads Redis directly, so an answer stored through one replica is an exact hit
on the others at once. The semantic tier searches a local index per replica, fed by a Redis
Stream: a paraphrase becomes a hit on the others once the entry arrived there (measured here).
A purge through one replica is seen by all, and one tenant's entries are never served to
another through any replica.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.testing.fake_upstream import FakeUpstream
from tests.scaleout.cluster import (
    UNCACHEABLE,
    UNCACHEABLE_CONTENT,
    Replica,
    ready_replicas,
    upstream_calls,
    wait_each,
    wait_for,
)
from tests.scaleout.cluster import base_config as base

UPSTREAM = "up-assistant"
KEYS = {"acme": "SO_CACHE_KEY_ACME", "globex": "SO_CACHE_KEY_GLOBEX"}
SECRET = {tenant: f"sk-scaleout-cache-{tenant}" for tenant in KEYS}
MAX_SEMANTIC_LAG = 2.0  # seconds from the answer through replica 1 to a paraphrase hit elsewhere


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, fake: FakeUpstream
) -> Iterator[list[Replica]]:
    namespace = f"so-cache-{uuid.uuid4().hex[:12]}"  # this module's keys in the session's Redis
    config = base(
        fake.url,
        KEYS,
        models=[{"name": "assistant", "provider": "fake", "upstream_model": UPSTREAM}],
        redis={"url": redis_url, "namespace": namespace},
        cache={
            "store": {"type": "redis"},
            "embedder": {"type": "minilm"},
            "defaults": {"enabled": True},
        },
    )
    env = {KEYS[t]: SECRET[t] for t in KEYS}
    yield from ready_replicas(tmp_path_factory, "cache", config, env, semantic=True)


@pytest.fixture
def three(cluster: list[Replica], fake_upstream: FakeUpstream) -> list[Replica]:
    """The replicas with an empty cache (purged through replica 1, seen by every index)."""
    cluster[0].admin("/admin/cache/purge", "POST", {})
    wait_each(cluster, empty, MAX_SEMANTIC_LAG, still_indexed)
    return cluster


def empty(replica: Replica) -> bool:
    return bool(replica.cache_stats()["entries"] == 0)


def still_indexed(replica: Replica) -> str:
    return f"{replica.name} still indexes {replica.cache_stats()}"


def entries_seen(replica: Replica, tenant: str, count: int = 1) -> None:
    """Until `replica`'s local index holds `count` entries of `tenant`."""
    wait_for(
        lambda: replica.cache_stats()["by_tenant"].get(tenant) == count,
        MAX_SEMANTIC_LAG,
        lambda: f"{replica.name} indexes {replica.cache_stats()}",
    )


def test_an_answer_through_one_replica_is_an_exact_hit_on_the_others_at_once(
    three: list[Replica], fake_upstream: FakeUpstream
) -> None:
    r1, r2, r3 = three
    question = "What are the opening hours of the Lisbon office?"
    first = r1.ask(question, key=SECRET["acme"])
    assert (first.cache, first.content) == ("miss", f"Echo: {question}")

    # Right after replica 1 answered, both others at the same time: no waiting for any sync.
    with ThreadPoolExecutor(2) as pool:
        others = list(pool.map(lambda r: r.ask(question, key=SECRET["acme"]), [r2, r3]))
    for replica, answer in zip([r2, r3], others, strict=True):
        assert answer.cache == "hit-exact", f"{replica.name}: {answer.headers}"
        assert answer.content == first.content
    # The exact tier folds only what never changes meaning (ends, line endings, NFC).
    normalized = r3.ask(f"  {question}\n", key=SECRET["acme"])
    assert (normalized.cache, normalized.content) == ("hit-exact", first.content)
    assert upstream_calls(fake_upstream, UPSTREAM) == 1, "only replica 1's miss went upstream"


def test_a_paraphrase_is_a_semantic_hit_on_the_other_replicas_within_the_lag(
    three: list[Replica], fake_upstream: FakeUpstream
) -> None:
    r1, r2, r3 = three
    question, paraphrase = "How do I reset my password?", "How can I reset my password?"
    first = r1.ask(question, key=SECRET["acme"])
    answered = time.monotonic()
    assert first.cache == "miss"
    # From now on a miss is answered but not stored: polling with the paraphrase must not
    # plant the paraphrase itself in the cache (it would then be an exact hit).
    fake_upstream.per_model[UPSTREAM] = UNCACHEABLE

    lags: dict[str, float] = {}
    misses = {r2.name: 0, r3.name: 0}
    while len(lags) < 2 and time.monotonic() - answered < MAX_SEMANTIC_LAG + 1:
        for replica in (r2, r3):
            if replica.name in lags:
                continue
            answer = replica.ask(paraphrase, key=SECRET["acme"])
            if answer.cache == "hit-semantic":
                lags[replica.name] = time.monotonic() - answered
                assert answer.content == first.content
                assert float(answer.headers["x-gateway-cache-similarity"]) >= 0.95
            else:
                assert answer.cache == "miss" and answer.content == UNCACHEABLE_CONTENT
                misses[replica.name] += 1
    print(f"semantic hit lag after the answer through replica 1: {lags}, misses: {misses}")
    assert set(lags) == {r2.name, r3.name}, f"no semantic hit within the lag: {lags} {misses}"
    assert max(lags.values()) < MAX_SEMANTIC_LAG, lags
    for replica in three:
        stats = replica.cache_stats()
        assert stats["entries"] == 1 and stats["by_tenant"] == {"acme": 1}, stats


def test_a_purge_through_one_replica_is_seen_by_all(
    three: list[Replica], fake_upstream: FakeUpstream
) -> None:
    r1, r2, r3 = three
    question, paraphrase = "Where can I download my invoices?", "Where do I download my invoices?"
    stored = r1.ask(question, key=SECRET["acme"])
    assert stored.cache == "miss"
    assert r2.ask(question, key=SECRET["acme"]).cache == "hit-exact"
    entries_seen(r3, "acme")
    assert r3.ask(paraphrase, key=SECRET["acme"]).cache == "hit-semantic"

    assert r3.admin("/admin/cache/purge", "POST", {}) == {"purged": 1}
    fake_upstream.per_model[UPSTREAM] = UNCACHEABLE  # the asks below store nothing new
    before = upstream_calls(fake_upstream, UPSTREAM)
    for replica in three:  # at once: the purge is in Redis, where every hit is read from
        for text in (question, paraphrase):
            answer = replica.ask(text, key=SECRET["acme"])
            assert answer.cache == "miss", f"{replica.name} {text!r}: {answer.headers}"
            assert answer.content == UNCACHEABLE_CONTENT
    assert upstream_calls(fake_upstream, UPSTREAM) == before + 6
    wait_each(three, empty, MAX_SEMANTIC_LAG, still_indexed)  # the local indexes follow


def test_a_tenant_never_sees_another_tenants_entry_through_any_replica(
    three: list[Replica], fake_upstream: FakeUpstream
) -> None:
    r1 = three[0]
    question = "What is the discount code for the spring sale?"
    paraphrase = "What's the discount code for the spring sale?"
    acme = r1.ask(question, key=SECRET["acme"])
    assert acme.cache == "miss"
    for replica in three:  # acme's entry is in every replica's semantic index
        entries_seen(replica, "acme")
    fake_upstream.per_model[UPSTREAM] = UNCACHEABLE  # globex's misses store nothing

    before = upstream_calls(fake_upstream, UPSTREAM)
    for replica in three:
        for text in (question, paraphrase):
            answer = replica.ask(text, key=SECRET["globex"])
            assert answer.cache == "miss", f"globex through {replica.name}: {answer.headers}"
            assert answer.content == UNCACHEABLE_CONTENT, "globex got acme's cached answer"
            # Not even compared: no candidate in globex's scope, so no similarity reported.
            assert "x-gateway-cache-similarity" not in answer.headers, answer.headers
    assert upstream_calls(fake_upstream, UPSTREAM) == before + 6
    # acme's entry was there to be found all along, through every replica.
    for replica in three:
        own = replica.ask(question, key=SECRET["acme"])
        assert (own.cache, own.content) == ("hit-exact", acme.content)
        assert replica.ask(paraphrase, key=SECRET["acme"]).cache == "hit-semantic"
