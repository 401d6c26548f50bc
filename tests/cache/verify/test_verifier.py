"""Verification at the cache stage, through SemanticCache with a scripted embedder so each
question's similarity to the stored one is exact: marks, the raised threshold, held-back
candidates, sampling and the shadow call's outcomes. (The judge's quality is measured in
test_judge_quality.py with the real model; here verdicts are given or trivially decided.)"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.service import CacheHit, CachePlan, SemanticCache
from gateway.cache.verify.judge import Verdict
from gateway.cache.verify.verifier import Probe
from gateway.config import CachePolicy, ModelRoute
from gateway.config.cache import VerifyPolicy
from gateway.context import RequestContext
from gateway.wire import chat_completion, usage

DIM = 64
STORED = "How do I reset my password?"
# Paraphrases the near-miss guards let through, each given its own direction.
ASKED = [
    "How can I reset my password?",
    "how do i reset my password",
    "Hey, how do I reset my password?",
    "Please, how do I reset my password?",
    "So how do I reset my password?",
    "How do I reset my password, please?",
    "Tell me how to reset my password.",
    "How do I reset my password!",
]


def _unit(i: int) -> np.ndarray:
    return np.eye(DIM, dtype=np.float32)[i]


class Embedder:
    """STORED is axis 0; asked question i sits at the cosine `cosines[i]` to it, each in its
    own direction; any other text (answers) its own axis, so different answers differ."""

    name = "scripted"
    dim = DIM

    def __init__(self) -> None:
        self.cosines = {q: 0.96 for q in ASKED}
        self.lean: dict[str, int] = {}  # a question whose direction this one shares
        self._others: dict[str, int] = {}

    async def start(self) -> None:
        return None

    def vector(self, text: str) -> np.ndarray:
        if text == STORED:
            return _unit(0)
        if text in self.cosines:
            c = self.cosines[text]
            direction = self.lean.get(text, ASKED.index(text))
            v = c * _unit(0) + math.sqrt(1 - c * c) * _unit(1 + direction)
            return v.astype(np.float32)
        slot = self._others.setdefault(text, 20 + len(self._others) % (DIM - 20))
        return _unit(slot)

    async def embed(self, text: str) -> np.ndarray:
        return self.vector(text)

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vector(t) for t in texts])


def _answer(text: str) -> dict[str, Any]:
    return chat_completion("m", {"role": "assistant", "content": text}, "stop", usage(9, 3))


class Events:
    def __init__(self) -> None:
        self.verdicts: list[tuple[str, str, bool]] = []
        self.shadows: list[tuple[str, str]] = []

    def verified(self, model: str, kind: str, agree: bool) -> None:
        self.verdicts.append((model, kind, agree))

    def shadow_call(self, model: str, outcome: str, usage: Any, tenant: str | None) -> None:
        self.shadows.append((model, outcome))


def _route(**verify: Any) -> ModelRoute:
    policy = CachePolicy(enabled=True, similarity_threshold=0.95, verify=VerifyPolicy(**verify))
    return ModelRoute("m", "p", "m", "chat", policy)


@pytest.fixture
async def cache() -> AsyncIterator[SemanticCache]:
    semantic = SemanticCache(EmbeddedStore(None, 100, 1000), Embedder(), events=Events())
    await semantic.start()
    await semantic.wait_ready()
    yield semantic
    await semantic.close()


def _events(cache: SemanticCache) -> Events:
    events = cache.verifier.events
    assert isinstance(events, Events)
    return events


def _embedder(cache: SemanticCache) -> Embedder:
    assert isinstance(cache.embedder, Embedder)
    return cache.embedder


async def _ask(
    cache: SemanticCache, text: str, route: ModelRoute
) -> tuple[RequestContext, CachePlan, CacheHit | None]:
    ctx = RequestContext(request_id="r", endpoint="chat", tenant="t")
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    plan = cache.plan(ctx, route, body, "default")
    assert plan is not None
    return ctx, plan, await cache.lookup(ctx, plan)


async def _fill(cache: SemanticCache, route: ModelRoute, answer: str = "Use the link.") -> None:
    ctx, plan, _ = await _ask(cache, STORED, route)
    cache.keep(ctx, plan, _answer(answer))
    await cache.flush()


async def _probed_hit(cache: SemanticCache) -> tuple[ModelRoute, Probe]:
    """A route that verifies every hit, its entries stored, and the probe of a hit on it."""
    route = _route(sample_rate=1.0)
    await _fill(cache, route)
    ctx, plan, hit = await _ask(cache, ASKED[0], route)
    assert hit is not None
    probe = cache.probe(plan, hit, ctx)
    assert probe is not None
    return route, probe


def _probe_for(ctx: RequestContext, plan: CachePlan, hit: CacheHit | None, text: str) -> Probe:
    """A served hit's probe, as the sampler would have made it (chance 1)."""
    assert hit is not None
    return Probe(
        "m", plan.policy, hit.entry, hit.similarity, text, ctx.embedding, 1.0, "served", "t"
    )


def _fields(probe: Probe) -> dict[str, Any]:
    return {name: getattr(probe, name) for name in Probe.__dataclass_fields__}


async def test_a_wrong_entry_is_not_served_again_for_its_question_or_its_neighbours(
    cache: SemanticCache,
) -> None:
    route = _route(sample_rate=1.0)
    await _fill(cache, route)
    embedder = _embedder(cache)
    wrong = ASKED[0]
    embedder.cosines[wrong] = 0.97
    ctx, plan, hit = await _ask(cache, wrong, route)
    assert ctx.cache_result == "hit-semantic"
    await cache.verifier.record(_probe_for(ctx, plan, hit, wrong), Verdict(False, "different"))
    again, _, _ = await _ask(cache, wrong, route)
    assert again.cache_result == "miss" and again.cache_near_miss == "verified-wrong"
    # farther from the entry than the wrong question was: refused too (the entry's boundary)
    embedder.cosines[ASKED[1]] = 0.965
    farther, _, _ = await _ask(cache, ASKED[1], route)
    assert farther.cache_near_miss == "verified-wrong"
    # a question nearer the wrong one than the entry: refused (its neighbourhood)
    near = ASKED[3]
    embedder.cosines[near] = 0.975
    embedder.lean[near] = ASKED.index(wrong)  # leans the wrong question's way
    neighbour, _, _ = await _ask(cache, near, route)
    assert neighbour.cache_near_miss == "verified-wrong"
    # closer to the entry than to the wrong question (0.99 to it, 0.96 to the wrong one)
    embedder.cosines[ASKED[2]] = 0.99
    closer, _, _ = await _ask(cache, ASKED[2], route)
    assert closer.cache_result == "hit-semantic"


async def test_measure_only_never_refuses(cache: SemanticCache) -> None:
    route = _route(sample_rate=1.0, adapt=False)
    await _fill(cache, route)
    ctx, plan, hit = await _ask(cache, ASKED[0], route)
    await cache.verifier.record(_probe_for(ctx, plan, hit, ASKED[0]), Verdict(False, "x"))
    again, _, _ = await _ask(cache, ASKED[0], route)
    assert again.cache_result == "hit-semantic"
    snapshot = cache.verifier.snapshot()["m"]
    assert snapshot.served.disagreements == 1 and snapshot.effective_threshold == 0.95


async def test_wrong_hits_below_a_similarity_raise_the_threshold_and_held_back_ones_explore(
    cache: SemanticCache,
) -> None:
    route = _route(sample_rate=1.0, max_error_rate=0.05)
    await _fill(cache, route)
    ctx, plan, hit = await _ask(cache, ASKED[0], route)
    base = _probe_for(ctx, plan, hit, ASKED[0])
    # wrong at 0.95-0.96, right at 0.97 and above (vectors not needed for the threshold)
    for i in range(60):
        similarity = 0.95 + 0.0002 * i
        probe = Probe(**{**_fields(base), "similarity": similarity, "vector": None})
        await cache.verifier.record(probe, Verdict(False, "different"))
    for i in range(60):
        probe = Probe(**{**_fields(base), "similarity": 0.97 + 0.0004 * i, "vector": None})
        await cache.verifier.record(probe, Verdict(True, "similar"))
    effective = cache.verifier.threshold("m", route.cache, "t")
    assert 0.962 <= effective <= 0.975
    embedder = _embedder(cache)
    embedder.cosines[ASKED[3]] = 0.955
    held, plan, _ = await _ask(cache, ASKED[3], route)
    assert held.cache_result == "miss" and held.cache_near_miss == "verified-threshold"
    assert plan.held_back is not None and plan.held_back.kind == "explored"
    # the fresh answer says the same as the cached one: an agreeing exploration
    cache.verifier.explore(plan.held_back, _answer("Use the link."))
    await cache.verifier.flush()
    assert _events(cache).verdicts[-1] == ("m", "explored", True)
    embedder.cosines[ASKED[4]] = 0.99
    confident, _, _ = await _ask(cache, ASKED[4], route)
    assert confident.cache_result == "hit-semantic"


async def test_hits_are_probed_at_their_rate_and_within_the_call_budget(
    cache: SemanticCache,
) -> None:
    await _fill(cache, _route(sample_rate=1.0))
    ctx, plan, hit = await _ask(cache, ASKED[0], _route(sample_rate=0.0))
    assert hit is not None and cache.probe(plan, hit, ctx) is None
    ctx, plan, exact = await _ask(cache, STORED, _route(sample_rate=1.0))
    assert exact is not None and exact.kind == "hit-exact"
    assert cache.probe(plan, exact, ctx) is None  # exact hits: not unless asked
    ctx, plan, exact = await _ask(cache, STORED, _route(sample_rate=1.0, exact_hits=True))
    assert exact is not None and cache.probe(plan, exact, ctx) is not None
    probes = []
    budget = _route(sample_rate=1.0, max_per_minute=3)
    for text in ASKED[:5]:
        ctx, plan, hit = await _ask(cache, text, budget)
        assert hit is not None and hit.kind == "hit-semantic"
        probes.append(cache.probe(plan, hit, ctx))
    # the model's bucket had 59 of 60 calls left, then its budget became 3 a minute
    assert sum(p is not None for p in probes) == 3
    assert [o for _, o in _events(cache).shadows] == ["rate_limited", "rate_limited"]


async def test_a_shadow_call_that_fails_costs_the_verdict_only(cache: SemanticCache) -> None:
    _, probe = await _probed_hit(cache)

    async def failing() -> dict[str, Any]:
        raise ConnectionError("upstream away")

    cache.verifier.verify(probe, failing)
    await cache.verifier.flush()
    assert _events(cache).shadows[-1] == ("m", "failed") and not _events(cache).verdicts

    async def same() -> dict[str, Any]:
        return _answer("Use the link.")

    async def other() -> dict[str, Any]:
        return _answer("Call the support line at 555-0100 and ask for a new card.")

    cache.verifier.verify(probe, same)
    cache.verifier.verify(probe, other)
    await cache.verifier.flush()
    assert sorted(agree for _, _, agree in _events(cache).verdicts) == [False, True]
    estimate = cache.verifier.snapshot()["m"].served
    assert estimate.verified == 2 and estimate.point == pytest.approx(0.5)


# --- per tenant (issue 32) -------------------------------------------------------------------


async def _ask_as(
    cache: SemanticCache, tenant: str, text: str, route: ModelRoute
) -> tuple[RequestContext, CachePlan, CacheHit | None]:
    ctx = RequestContext(request_id="r", endpoint="chat", tenant=tenant)
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    plan = cache.plan(ctx, route, body, "default")
    assert plan is not None
    return ctx, plan, await cache.lookup(ctx, plan)


async def _fill_as(cache: SemanticCache, tenant: str, route: ModelRoute) -> None:
    ctx, plan, _ = await _ask_as(cache, tenant, STORED, route)
    cache.keep(ctx, plan, _answer("Use the link."))
    await cache.flush()


async def test_one_tenants_disagreeing_verdicts_leave_another_tenants_threshold_and_estimate(
    cache: SemanticCache,
) -> None:
    route = _route(sample_rate=1.0, max_error_rate=0.05)
    for tenant in ("victim", "attacker"):
        await _fill_as(cache, tenant, route)
    ctx, plan, hit = await _ask_as(cache, "victim", ASKED[0], route)
    assert hit is not None
    await cache.verifier.record(
        Probe(**{**_fields(_probe_for(ctx, plan, hit, ASKED[0])), "tenant": "victim"}),
        Verdict(True, "identical"),
    )
    before = cache.verifier.snapshot()["m"].tenants["victim"]
    ctx, plan, hit = await _ask_as(cache, "attacker", ASKED[0], route)
    assert hit is not None
    attack = Probe(**{**_fields(_probe_for(ctx, plan, hit, ASKED[0])), "tenant": "attacker"})
    for i in range(2000):  # paraphrases over the whole band, every one "different"
        similarity = 0.95 + 0.045 * (i % 100) / 100
        await cache.verifier.record(
            Probe(**{**_fields(attack), "similarity": similarity}), Verdict(False, "different")
        )
    policy = route.cache
    assert cache.verifier.threshold("m", policy, "attacker") > 0.99  # its own: raised
    assert cache.verifier.threshold("m", policy, "victim") == 0.95  # the other's: untouched
    after = cache.verifier.snapshot()["m"].tenants["victim"]
    assert after == before and after.served.point == 1.0 and after.effective_threshold == 0.95
    # the victim's paraphrases still hit; the attacker's own are refused
    victim, _, _ = await _ask_as(cache, "victim", ASKED[1], route)
    attacker, _, _ = await _ask_as(cache, "attacker", ASKED[1], route)
    assert victim.cache_result == "hit-semantic"
    assert attacker.cache_result == "miss" and attacker.cache_near_miss is not None
    # the model's own line pools both for the operator; its threshold the highest in force
    pooled = cache.verifier.snapshot()["m"]
    assert pooled.served.verified == 2001 and pooled.effective_threshold > 0.99


async def test_a_tenant_without_evidence_uses_the_configured_threshold_and_states_are_bounded(
    cache: SemanticCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.cache.verify import ledger

    monkeypatch.setattr(ledger, "MAX_WINDOWS", 2)
    route = _route(sample_rate=1.0, max_error_rate=0.05)
    await _fill_as(cache, "a", route)
    ctx, plan, hit = await _ask_as(cache, "a", ASKED[0], route)
    base = Probe(**{**_fields(_probe_for(ctx, plan, hit, ASKED[0])), "vector": None})
    for tenant in ("a", "b", "c"):
        for _ in range(40):
            probe = Probe(**{**_fields(base), "tenant": tenant})
            cache.verifier.threshold("m", route.cache, tenant)  # seen: its state kept
            await cache.verifier.record(probe, Verdict(False, "different"))
    assert len(cache.verifier.ledger.models()) == 2  # "a"'s window went first
    assert cache.verifier.threshold("m", route.cache, "c") > 0.95
    assert cache.verifier.threshold("m", route.cache, "a") == 0.95  # no evidence held: default
    assert cache.verifier.threshold("m", route.cache, "never-seen") == 0.95


async def test_answers_that_disagree_with_themselves_are_no_verdict_and_not_verified_again(
    cache: SemanticCache,
) -> None:
    route, probe = await _probed_hit(cache)
    poems = iter(
        [
            "Waves fold the grey light under, gulls write their names on foam.",
            "The harbour sleeps in amber; 7 boats dream of open water.",
        ]
    )

    async def a_new_poem_each_time() -> dict[str, Any]:
        return _answer(next(poems))

    cache.verifier.verify(probe, a_new_poem_each_time)
    await cache.verifier.flush()
    events = _events(cache)
    assert [o for _, o in events.shadows] == ["answered", "answered", "varies"]
    assert not events.verdicts and not cache.verifier.ledger.models()
    assert cache.verifier.threshold("m", route.cache, "t") == 0.95
    # the entry is known to vary: its next hit costs no shadow call
    ctx, plan, hit = await _ask(cache, ASKED[1], route)
    assert hit is not None and cache.probe(plan, hit, ctx) is None
    assert events.shadows[-1] == ("m", "varies")


async def test_a_disagreement_the_upstream_repeats_is_a_wrong_hit(cache: SemanticCache) -> None:
    _, probe = await _probed_hit(cache)

    async def changed() -> dict[str, Any]:
        return _answer("Call the support line at 555-0100 and ask for a new card.")

    cache.verifier.verify(probe, changed)
    await cache.verifier.flush()
    assert [o for _, o in _events(cache).shadows] == ["answered", "answered"]
    assert _events(cache).verdicts == [("m", "served", False)]


async def test_hot_or_creative_requests_are_not_verified(cache: SemanticCache) -> None:
    route = _route(sample_rate=1.0)
    await _fill(cache, route)
    ctx, plan, hit = await _ask(cache, ASKED[0], route)
    assert hit is not None and plan.varies is None
    for why in ("temperature", "creative"):
        plan.varies = why
        assert cache.probe(plan, hit, ctx) is None
    assert [o for _, o in _events(cache).shadows] == ["varies", "varies"]
    hot = RequestContext(request_id="r", endpoint="chat", tenant="t")
    body = {"model": "m", "messages": [{"role": "user", "content": STORED}], "temperature": 0.9}
    found = cache.plan(hot, route, body, "default")
    assert found is not None and found.varies == "temperature"
