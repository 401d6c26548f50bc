"""Verdicts and marks in the embedded store's SQLite file: a restarted gateway keeps them."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.factory import build_cache
from gateway.cache.service import SemanticCache
from gateway.cache.verify import ledger as memory_ledger
from gateway.cache.verify import sqlite_ledger
from gateway.cache.verify.estimate import Observation
from gateway.cache.verify.judge import Verdict
from gateway.cache.verify.ledger import Mark, MemoryLedger, window_key
from gateway.cache.verify.redis_ledger import RedisLedger
from gateway.cache.verify.sqlite_ledger import SqliteLedger
from gateway.cache.verify.verifier import Probe
from gateway.config import CacheConfig, CachePolicy, ModelRoute, RedisTarget
from gateway.config.cache import CachePolicyOverride, VerifyPolicy
from gateway.context import RequestContext
from gateway.embedding.embedder import HashEmbedder
from gateway.wire import chat_completion, usage
from tests.cache.entries import vector


def _verdict(similarity: float, agree: bool = True, kind: Any = "served") -> Observation:
    return Observation(similarity, agree, 2.0, kind, time.time())


async def _reopened(path: Path) -> SqliteLedger:
    ledger = SqliteLedger(str(path))
    await ledger.open()
    return ledger


async def test_verdicts_and_marks_survive_close_and_open(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    ledger = await _reopened(path)
    recorded = [_verdict(0.95), _verdict(0.96, agree=False), _verdict(0.9, kind="explored")]
    for observation in recorded:
        await ledger.record("m", observation)
    await ledger.record("other", _verdict(0.99))
    await ledger.mark(Mark("s:1", vector(1), 0.96, time.time() + 600))
    await ledger.mark(Mark("s:1", vector(2), 0.97, time.time() + 600))
    brief = time.time() + 0.05
    await ledger.mark(Mark("s:2", vector(3), 0.95, brief))  # gone by the restart
    await ledger.close()
    while time.time() <= brief:
        time.sleep(0.01)

    again = await _reopened(path)
    try:
        assert list(again.observations("m")) == recorded  # in order, every field
        assert again.models() == ["m", "other"]
        assert again.version("m") == 3
        marks = again.marks("s:1")
        assert [m.similarity for m in marks] == pytest.approx([0.96, 0.97])
        assert np.allclose(marks[0].vector, vector(1)) and np.allclose(marks[1].vector, vector(2))
        assert again.marks("s:2") == ()
        db = sqlite3.connect(path)
        assert db.execute("SELECT COUNT(*) FROM verify_marks").fetchone() == (2,)
        db.close()
    finally:
        await again.close()


async def test_windows_are_trimmed_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_ledger, "WINDOW", 5)
    monkeypatch.setattr(sqlite_ledger, "WINDOW", 5)
    path = tmp_path / "cache.sqlite3"
    ledger = await _reopened(path)
    for i in range(12):
        await ledger.record("m", _verdict(i / 100))
    await ledger.record("n", _verdict(0.5))
    await ledger.close()
    db = sqlite3.connect(path)
    counts = dict(db.execute("SELECT model, COUNT(*) FROM verify_verdicts GROUP BY model"))
    db.close()
    assert counts == {"m": 5, "n": 1}
    again = await _reopened(path)
    assert [o.similarity for o in again.observations("m")] == [0.07, 0.08, 0.09, 0.1, 0.11]
    await again.close()


# --- a restarted cache: the entry found wrong is not served again for that question ----------

STORED = "How do I reset my password?"
ASKED = "How do I reset my password please?"


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


async def _started(path: Path) -> SemanticCache:
    store = EmbeddedStore(str(path), max_entries=100, approximate_above=1000)
    cache = SemanticCache(store, HashEmbedder(), ledger=SqliteLedger(str(path)))
    await cache.start()
    await cache.wait_ready()
    return cache


async def test_a_mark_survives_a_restart_of_the_cache(tmp_path: Path) -> None:
    path, route = tmp_path / "cache.sqlite3", _route()
    cache = await _started(path)
    ctx, plan, _ = await _ask(cache, STORED, route)
    answer = chat_completion(
        "m", {"role": "assistant", "content": "Use the link."}, "stop", usage(9, 3)
    )
    cache.keep(ctx, plan, answer)
    await cache.flush()
    ctx, plan, hit = await _ask(cache, ASKED, route)
    assert hit is not None and hit.kind == "hit-semantic"
    probe = Probe(
        "m", plan.policy, hit.entry, hit.similarity, ASKED, ctx.embedding, 1.0, "served", "t"
    )
    await cache.verifier.record(probe, Verdict(False, "different"))
    await cache.close()

    restarted = await _started(path)
    try:
        again, _, _ = await _ask(restarted, ASKED, route)
        assert again.cache_result == "miss" and again.cache_near_miss == "verified-wrong"
        exact, _, hit = await _ask(restarted, STORED, route)  # the entry itself is still there
        assert exact.cache_result == "hit-exact"
        window = restarted.verifier.ledger.observations(window_key("t", "m"))
        assert [o.agree for o in window] == [False]
    finally:
        await restarted.close()


@pytest.mark.parametrize(
    ("store", "ledger"),
    [("memory", MemoryLedger), ("sqlite", SqliteLedger), ("redis", RedisLedger)],
)
def test_the_store_type_decides_where_verdicts_live(
    tmp_path: Path, store: str, ledger: type
) -> None:
    config = CacheConfig.model_validate(
        {
            "store": {"type": store, "path": str(tmp_path / "c.sqlite3")},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": True},
        }
    )
    route = ModelRoute("m", "p", "m", "chat", config.policy_for(CachePolicyOverride()))
    cache = build_cache(config, [route], shared=RedisTarget("redis://127.0.0.1:1/0", "ns"))
    assert cache is not None
    assert type(cache.verifier.ledger) is ledger  # nothing opened: build only


async def test_each_tenants_evidence_survives_a_restart_as_its_own(tmp_path: Path) -> None:
    """One tenant's disagreeing verdicts, written to the file, raise only its own threshold
    again after a restart; another tenant's stays the configured one, its window empty."""
    path, route = tmp_path / "cache.sqlite3", _route()
    cache = await _started(path)
    ctx, plan, _ = await _ask(cache, STORED, route)
    answer = chat_completion("m", {"role": "assistant", "content": "x"}, "stop", usage(9, 3))
    cache.keep(ctx, plan, answer)
    await cache.flush()
    _, plan, hit = await _ask(cache, ASKED, route)
    assert hit is not None
    for i in range(60):
        probe = Probe(
            "m", plan.policy, hit.entry, 0.6 + 0.003 * i, ASKED, None, 1.0, "served", "attacker"
        )
        await cache.verifier.record(probe, Verdict(False, "different"))
    raised = cache.verifier.threshold("m", route.cache, "attacker")
    assert raised > 0.6 and cache.verifier.threshold("m", route.cache, "t") == 0.6
    await cache.close()

    restarted = await _started(path)
    try:
        assert restarted.verifier.threshold("m", route.cache, "attacker") == raised
        assert restarted.verifier.threshold("m", route.cache, "t") == 0.6
        assert not restarted.verifier.ledger.observations(window_key("t", "m"))
        assert len(restarted.verifier.ledger.observations(window_key("attacker", "m"))) == 60
    finally:
        await restarted.close()
