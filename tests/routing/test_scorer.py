"""The complexity score: features weighed by policy, exemplar votes, and the real MiniLM."""

# ruff: noqa: RUF001  (full-width CJK punctuation on purpose)

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import pytest_asyncio
from pydantic import ValidationError

from gateway.cache.embedder import Embedder, HashEmbedder
from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.config.routing import ProfileName, ScoringConfig
from gateway.routing.features import SCORED, Features, extract
from gateway.routing.scorer import (
    BIAS,
    DEFAULT_WEIGHTS,
    PROFILES,
    SATURATION,
    ComplexityScorer,
    Score,
    resolve,
    resolve_weights,
)
from gateway.testing.harness.configs import write_yaml

HI = "hi"
PROOF = "Prove rigorously, step by step, that the square root of 2 is irrational."


def features(text: str) -> Features:
    return extract({"messages": [{"role": "user", "content": text}]})


def write_exemplars(tmp_path: Path, rows: list[tuple[str, float]]) -> str:
    exemplars = [{"text": t, "difficulty": d} for t, d in rows]
    return str(write_yaml(tmp_path / "exemplars.yaml", {"exemplars": exemplars}))


def test_every_scored_feature_has_a_default_weight_and_a_saturation() -> None:
    assert set(DEFAULT_WEIGHTS) == {*SCORED, BIAS}
    assert all(set(p.weights) == {*SCORED, BIAS} for p in PROFILES.values())
    assert set(SATURATION) == set(SCORED)


# -- profiles: fitted weights with their exemplar mix, picked by config --

LONG_WORD_PROBLEM = (
    "A baker sells 48 muffins each morning and 3/4 as many in the afternoon. Each muffin costs "
    "$2.50, flour for a dozen costs $4 and he pays $35 a day for the stall. He works 6 days a "
    "week. How much profit does he make in 4 weeks if a fifth of the afternoon muffins go unsold?"
)


def test_the_config_names_the_profiles_the_scorer_has() -> None:
    assert set(get_args(ProfileName)) == set(PROFILES)
    assert ScoringConfig().profile == "general"
    assert DEFAULT_WEIGHTS is PROFILES["general"].weights


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_profile_picks_the_weights_and_the_mix(name: ProfileName) -> None:
    scorer = ComplexityScorer(ScoringConfig(profile=name))
    profile = PROFILES[name]
    assert scorer.profile == name
    assert scorer.weights == dict(profile.weights)
    assert (scorer.exemplar_weight, scorer.neighbours) == (
        profile.exemplar_weight,
        profile.neighbours,
    )
    assert resolve(ScoringConfig(profile=name)) == profile


def test_the_profiles_are_the_two_fits() -> None:
    """general (489bee4): the vote mixed in, length moderate; word-problems (9a6dce1): the
    features alone, length heavy, a question mark lowering the score."""
    general, word = PROFILES["general"], PROFILES["word-problems"]
    assert (general.exemplar_weight, general.neighbours) == (0.75, 15)
    assert (word.exemplar_weight, word.neighbours) == (0.0, 7)
    assert general.weights["last_user_tokens"] == 1.08 and general.weights["questions"] == 0.49
    assert word.weights["last_user_tokens"] == 4.54 and word.weights["questions"] == -1.37
    by_general = ComplexityScorer(ScoringConfig()).score(features(LONG_WORD_PROBLEM))
    by_word = ComplexityScorer(ScoringConfig(profile="word-problems")).score(
        features(LONG_WORD_PROBLEM)
    )
    assert by_general.parts["last_user_tokens"] < by_word.parts["last_user_tokens"]
    assert by_general.parts["questions"] > 0 > by_word.parts["questions"]


def test_explicit_settings_override_the_profile() -> None:
    config = ScoringConfig(
        profile="word-problems", weights={"questions": 0.2}, exemplar_weight=0.5, neighbours=3
    )
    scorer = ComplexityScorer(config)
    word = PROFILES["word-problems"].weights
    assert scorer.weights == {**word, "questions": 0.2}
    assert (scorer.exemplar_weight, scorer.neighbours) == (0.5, 3)
    # 0 is a setting, not "unset": the general profile's vote is turned off.
    off = ComplexityScorer(ScoringConfig(exemplar_weight=0))
    assert off.exemplar_weight == 0 and off.neighbours == PROFILES["general"].neighbours
    assert off.weights == dict(PROFILES["general"].weights)
    # Only what is set overrides: the rest is the profile's.
    mixed = ComplexityScorer(ScoringConfig(profile="word-problems", neighbours=11))
    assert (mixed.exemplar_weight, mixed.neighbours) == (0.0, 11)
    assert resolve_weights({"math": 2}, "word-problems") == {**word, "math": 2}


def test_an_unknown_profile_is_rejected_with_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="'general' or 'word-problems'"):
        ScoringConfig(profile="math")
    with pytest.raises(ValueError, match=r"unknown routing weight\(s\) lenght"):
        ComplexityScorer(ScoringConfig(profile="word-problems", weights={"lenght": 1}))


def test_a_proof_request_scores_above_a_greeting() -> None:
    scorer = ComplexityScorer(ScoringConfig())
    hi, proof = scorer.score(features(HI)), scorer.score(features(PROOF))
    assert 0 <= hi.value < 0.1 < 0.3 < proof.value <= 1
    assert proof.parts["reasoning"] > 0 and "reasoning" not in hi.parts
    assert hi.parts["simple"] < 0
    assert hi.neighbours == () and "exemplars" not in hi.parts


def test_parts_add_up_to_the_feature_part() -> None:
    score = ComplexityScorer(ScoringConfig()).score(features(PROOF))
    raw = sum(v for k, v in score.parts.items() if k not in ("features", "exemplars"))
    assert score.parts["features"] == pytest.approx(1 / (1 + math.exp(-raw)))
    assert score.value == score.parts["features"]


def test_more_of_a_feature_never_lowers_the_score() -> None:
    scorer = ComplexityScorer(ScoringConfig())
    base = features("Compare these.")
    for name in SCORED:
        if DEFAULT_WEIGHTS[name] < 0:
            continue
        values = [
            scorer.score(Features(**{**_fields(base), name: n})).value for n in (0, 1, 3, 10, 1000)
        ]
        assert values == sorted(values), name


def _fields(f: Features) -> dict[str, object]:
    return {name: getattr(f, name) for name in Features.__dataclass_fields__}


def test_weights_are_overridden_by_name() -> None:
    default = ComplexityScorer(ScoringConfig()).score(features(PROOF))
    quiet = ComplexityScorer(ScoringConfig(weights={"reasoning": 0, BIAS: -3})).score(
        features(PROOF)
    )
    assert "reasoning" not in quiet.parts and quiet.parts[BIAS] == -3
    assert quiet.value < default.value
    assert resolve_weights({"math": 2})["math"] == 2
    assert resolve_weights({})["math"] == DEFAULT_WEIGHTS["math"]


def test_unknown_weight_names_are_rejected_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown routing weight\(s\) lenght, maths; known: .*"):
        ComplexityScorer(ScoringConfig(weights={"lenght": 1, "maths": 1}))


async def test_exemplars_vote_by_similarity(tmp_path: Path) -> None:
    path = write_exemplars(
        tmp_path,
        [("hello there my friend", 0.0), ("good morning friend", 0.1),
         ("prove the theorem rigorously", 1.0), ("prove the lemma formally", 0.9)],
    )  # fmt: skip
    embedder = HashEmbedder(dim=256)
    scorer = ComplexityScorer(ScoringConfig(exemplars=path, neighbours=2, exemplar_weight=0.5))
    assert not scorer.prepared
    await scorer.prepare(embedder)
    assert scorer.prepared

    text = "please prove the theorem rigorously"
    score = scorer.score(features(text), await embedder.embed(text))
    assert [n.text for n in score.neighbours] == [
        "prove the theorem rigorously",
        "prove the lemma formally",
    ]
    assert score.neighbours[0].similarity > score.neighbours[1].similarity > 0
    assert 0.9 <= score.parts["exemplars"] <= 1.0
    mixed = 0.5 * score.parts["features"] + 0.5 * score.parts["exemplars"]
    assert score.value == pytest.approx(mixed)

    friendly_text = "hello there friend"
    friendly = scorer.score(features(friendly_text), await embedder.embed(friendly_text))
    assert friendly.parts["exemplars"] <= 0.1 < 0.9 <= score.parts["exemplars"]


async def test_one_neighbour_votes_its_own_difficulty(tmp_path: Path) -> None:
    path = write_exemplars(tmp_path, [("alpha beta gamma", 0.2), ("delta epsilon zeta", 0.8)])
    embedder = HashEmbedder()
    scorer = ComplexityScorer(ScoringConfig(exemplars=path, neighbours=1, exemplar_weight=1))
    await scorer.prepare(embedder)
    score = scorer.score(features("x"), await embedder.embed("delta epsilon zeta"))
    assert score.value == pytest.approx(0.8)
    assert len(score.neighbours) == 1


async def test_more_neighbours_than_exemplars_use_them_all(tmp_path: Path) -> None:
    path = write_exemplars(tmp_path, [("alpha beta", 0.2), ("gamma delta", 0.8)])
    embedder = HashEmbedder()
    scorer = ComplexityScorer(ScoringConfig(exemplars=path, neighbours=50, exemplar_weight=0.5))
    await scorer.prepare(embedder)
    score = scorer.score(features("x"), await embedder.embed("alpha beta"))
    assert len(score.neighbours) == 2 and 0.2 <= score.parts["exemplars"] <= 0.8


async def test_no_vector_or_no_exemplar_weight_means_features_only() -> None:
    embedder = HashEmbedder()
    vector = await embedder.embed(PROOF)
    unprepared = ComplexityScorer(ScoringConfig())
    assert unprepared.score(features(PROOF), vector).parts.keys().isdisjoint({"exemplars"})
    off = ComplexityScorer(ScoringConfig(exemplar_weight=0))
    await off.prepare(embedder)
    score = off.score(features(PROOF), vector)
    assert score.value == score.parts["features"] and score.neighbours == ()


async def test_a_vector_from_another_embedder_is_an_error() -> None:
    scorer = ComplexityScorer(ScoringConfig(exemplar_weight=0.5))
    await scorer.prepare(HashEmbedder(dim=64))
    with pytest.raises(ValueError, match="use the same embedder"):
        scorer.score(features(HI), np.ones(32, dtype=np.float32))


async def test_scoring_is_fast() -> None:
    embedder = HashEmbedder(dim=384)
    scorer = ComplexityScorer(ScoringConfig())
    await scorer.prepare(embedder)
    f, vector = features(PROOF), await embedder.embed(PROOF)
    times = []
    for _ in range(200):
        started = time.perf_counter()
        scorer.score(f, vector)
        times.append(time.perf_counter() - started)
    assert sorted(times)[100] < 0.001  # median; typically 20 to 30 µs


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
    for name in PROFILES:  # general mixes in the vote, word-problems is features only
        default = ComplexityScorer(ScoringConfig(profile=name))
        await default.prepare(minilm)
        simple = await _scores(default, minilm, SIMPLE[language])
        hard = await _scores(default, minilm, HARD[language])
        assert max(s.value for s in simple) < min(s.value for s in hard), name
    # Mixed with the exemplar vote, as policy may set it: both halves agree on the direction.
    scorer = ComplexityScorer(ScoringConfig(exemplar_weight=0.5, neighbours=7))
    await scorer.prepare(minilm)
    simple = await _scores(scorer, minilm, SIMPLE[language])
    hard = await _scores(scorer, minilm, HARD[language])
    assert max(s.value for s in simple) < min(s.value for s in hard)
    for part in ("features", "exemplars"):
        simple_mean = np.mean([s.parts[part] for s in simple])
        assert simple_mean < np.mean([s.parts[part] for s in hard]), part
    assert all(len(s.neighbours) == 7 for s in simple + hard)
