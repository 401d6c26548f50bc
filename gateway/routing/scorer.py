"""The complexity score in [0, 1]: weighted prompt features, mixed with exemplar votes.

Feature part: each feature's count is squashed onto [0, 1] by `log(1 + count) / log(1 +
saturation)` (capped at 1), so the first code block or reasoning marker counts most and a
hundred numbers do not drown everything else; the weighted sum plus `bias` goes through a
logistic. Every term is in `Score.parts`, so a routing decision can be read back.

Exemplar part: the cosine of the request's embedding (the one the cache computes: nothing is
embedded here at request time) with each labelled exemplar; the `neighbours` nearest vote with
their difficulty, weighted by similarity. The two parts mix as
`(1 - exemplar_weight) * features + exemplar_weight * exemplars`; with no embedding (no embedder,
or before the exemplars are embedded), the feature part alone.

The weights, `exemplar_weight` and `neighbours` come from a profile (`routing.scoring.profile`),
each fitted by bench/fit_routing_weights.py on labelled prompts written for this project, never
on a benchmark. Both fits are a logistic regression pulled towards the weights first set by hand
(what each feature means; kept in that script as its prior), its strength and the exemplar mix
chosen by cross-validation; features the data never shows (tools, depth, images) keep their
hand-set weight.

- `general` (the default), for general traffic: fitted on the exemplars (exemplars.yaml), the
  math word problems of bench/data/routing_dev.yaml (labelled by the number of solution steps)
  and the general prompts of bench/data/routing_dev_general.yaml (chit-chat, lookups, long
  pastes to summarize, translate, proofread or extract from, code to read or debug,
  concurrency and design questions, proofs, analysis, planning, writing; English and Chinese;
  length and difficulty decorrelated where real traffic decorrelates them). Math word problems
  and everything else weigh half each; each weight is held to its prior's sign or 0 (a question
  mark cannot make a prompt simpler), the penalty chosen by the one-standard-error rule.
  `multi_step` and `constraints` came out 0 (unconstrained, slightly negative: in this data they
  do not mark harder prompts). The exemplar vote weighs 0.75 with 15 neighbours: on held-out
  general prompts it ranks difficulty far better than the features (a request to summarize a
  long paste carries the markers of the pasted text; its embedding reads as a summary request).
- `word-problems`, for traffic that is mostly math word problems: fitted on the exemplars and
  routing_dev.yaml alone, unweighted, without sign constraints, the penalty with the lowest
  held-out cross-entropy. It ranks word problems by their length and numbers (in that data the
  longer problem has more steps); on general traffic it is skewed: length weighs most, a code
  block next to nothing, a question mark lowers the score. The features alone: the vote did not
  rank held-out word problems better (the mix chosen by cross-validation is 0).

To refit a profile after changing its data: `python bench/fit_routing_weights.py --profile NAME
--write` (without --write it checks that the fit reproduces the numbers below).
`routing.scoring.weights` overrides any weight by name, `exemplar_weight` and `neighbours` the
profile's mix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from gateway.config.routing import ProfileName, ScoringConfig
from gateway.routing.exemplars import Exemplar, load_exemplars
from gateway.routing.features import SCORED, Features

if TYPE_CHECKING:
    from gateway.cache.embedder import Embedder

BIAS = "bias"


@dataclass(frozen=True, slots=True)
class Profile:
    """Weights for every scored feature and `bias`, with the exemplar mix fitted with them."""

    exemplar_weight: float
    neighbours: int
    weights: Mapping[str, float]


# Written by bench/fit_routing_weights.py --profile NAME --write (keep this shape).
PROFILES: Mapping[ProfileName, Profile] = MappingProxyType(
    {
        "general": Profile(
            exemplar_weight=0.75,
            neighbours=15,
            weights=MappingProxyType(
                {
                    BIAS: -1.43,
                    "last_user_tokens": 1.08,
                    "total_tokens": 0.14,
                    "code_blocks": 0.47,
                    "identifiers": 0.26,
                    "code_task": 0.66,
                    "math": 1.21,
                    "numbers": 0.57,
                    "relations": 0.7,
                    "reasoning": 1.9,
                    "multi_step": 0.0,
                    "questions": 0.49,
                    "constraints": 0.0,
                    "simple": -0.97,
                    "tools": 0.8,
                    "depth": 0.4,
                    "images": 0.8,
                }
            ),
        ),
        "word-problems": Profile(
            exemplar_weight=0.0,
            neighbours=7,
            weights=MappingProxyType(
                {
                    BIAS: -3.95,
                    "last_user_tokens": 4.54,
                    "total_tokens": 2.67,
                    "code_blocks": 0.03,
                    "identifiers": 0.82,
                    "code_task": 1.0,
                    "math": 1.44,
                    "numbers": 1.8,
                    "relations": 0.48,
                    "reasoning": 2.34,
                    "multi_step": 0.25,
                    "questions": -1.37,
                    "constraints": 0.49,
                    "simple": -0.13,
                    "tools": 0.8,
                    "depth": 0.4,
                    "images": 0.8,
                }
            ),
        ),
    }
)
DEFAULT_WEIGHTS: Mapping[str, float] = PROFILES["general"].weights
# The count at which a feature's part is full (its weight); log-scaled below that.
SATURATION: Mapping[str, float] = MappingProxyType(
    {
        "last_user_tokens": 1000,
        "total_tokens": 16000,
        "code_blocks": 3,
        "identifiers": 20,
        "code_task": 4,
        "math": 8,
        "numbers": 16,
        "relations": 8,
        "reasoning": 3,
        "multi_step": 6,
        "questions": 4,
        "constraints": 6,
        "simple": 1,
        "tools": 8,
        "depth": 12,
        "images": 2,
    }
)

FEATURES_PART = "features"
EXEMPLARS_PART = "exemplars"


@dataclass(frozen=True, slots=True)
class Neighbour:
    text: str
    domain: str
    difficulty: float
    similarity: float


@dataclass(frozen=True, slots=True)
class Score:
    """`value` in [0, 1]. `parts`: `bias` and each weighted feature term that is not zero (their
    sum goes through the logistic), `features` (the feature part), and `exemplars` (the vote)
    when exemplars voted. `neighbours`: the voters, nearest first."""

    value: float
    parts: dict[str, float]
    neighbours: tuple[Neighbour, ...] = field(default=())


def resolve_weights(
    overrides: Mapping[str, float], profile: ProfileName = "general"
) -> dict[str, float]:
    """The profile's weights with `overrides` applied; an unknown name is an error that lists
    the known."""
    weights = PROFILES[profile].weights
    unknown = sorted(set(overrides) - set(weights))
    if unknown:
        raise ValueError(
            f"unknown routing weight(s) {', '.join(unknown)}; known: {', '.join(sorted(weights))}"
        )
    return {**weights, **overrides}


def resolve(config: ScoringConfig) -> Profile:
    """What `config` scores with: its profile, with the weights and mix it sets instead."""
    profile = PROFILES[config.profile]
    return Profile(
        exemplar_weight=(
            profile.exemplar_weight if config.exemplar_weight is None else config.exemplar_weight
        ),
        neighbours=profile.neighbours if config.neighbours is None else config.neighbours,
        weights=resolve_weights(config.weights, config.profile),
    )


class ComplexityScorer:
    def __init__(self, config: ScoringConfig) -> None:
        resolved = resolve(config)
        self.profile = config.profile
        self.weights = dict(resolved.weights)
        self.exemplars: tuple[Exemplar, ...] = load_exemplars(config.exemplars)
        self.neighbours = min(resolved.neighbours, len(self.exemplars))
        self.exemplar_weight = resolved.exemplar_weight
        self._terms = tuple(
            (name, self.weights[name], math.log1p(SATURATION[name]))
            for name in SCORED
            if self.weights[name] != 0
        )
        self._difficulty = np.array([e.difficulty for e in self.exemplars], dtype=np.float32)
        self._matrix: np.ndarray | None = None

    @property
    def prepared(self) -> bool:
        return self._matrix is not None

    async def prepare(self, embedder: Embedder) -> None:
        """Embed the exemplars once, with the embedder whose vectors `score` will be given."""
        vectors = await embedder.embed_many([e.text for e in self.exemplars])
        self._matrix = np.ascontiguousarray(vectors, dtype=np.float32)

    def score(self, features: Features, vector: np.ndarray | None = None) -> Score:
        """The score of a request; `vector` is its embedding (L2-normalized), if there is one.
        Before `prepare`, or with no vector, the feature part alone."""
        parts = {BIAS: self.weights[BIAS]}
        raw = parts[BIAS]
        for name, weight, log_saturation in self._terms:
            count = getattr(features, name)
            if count > 0:
                part = weight * min(1.0, math.log1p(count) / log_saturation)
                parts[name] = part
                raw += part
        by_features = 1.0 / (1.0 + math.exp(-raw))
        parts[FEATURES_PART] = by_features
        if vector is None or self._matrix is None or self.exemplar_weight == 0:
            return Score(by_features, parts)
        vote, neighbours = self._vote(vector)
        parts[EXEMPLARS_PART] = vote
        value = (1 - self.exemplar_weight) * by_features + self.exemplar_weight * vote
        return Score(min(1.0, max(0.0, value)), parts, neighbours)

    def _vote(self, vector: np.ndarray) -> tuple[float, tuple[Neighbour, ...]]:
        assert self._matrix is not None
        if vector.shape != (self._matrix.shape[1],):
            raise ValueError(
                f"a vector of shape {vector.shape}, but the exemplars were embedded "
                f"with dimension {self._matrix.shape[1]}: use the same embedder"
            )
        similarities = self._matrix @ vector.astype(np.float32, copy=False)
        k = self.neighbours
        nearest = np.argpartition(-similarities, k - 1)[:k] if k < len(similarities) else None
        if nearest is None:
            nearest = np.arange(len(similarities))
        nearest = nearest[np.argsort(-similarities[nearest])]
        weights = np.maximum(similarities[nearest], 0.0)
        difficulty = self._difficulty[nearest]
        total = float(weights.sum())
        vote = float(weights @ difficulty) / total if total > 1e-6 else float(difficulty.mean())
        neighbours = tuple(
            Neighbour(e.text, e.domain, e.difficulty, float(s))
            for e, s in zip(
                (self.exemplars[i] for i in nearest), similarities[nearest], strict=True
            )
        )
        return vote, neighbours
