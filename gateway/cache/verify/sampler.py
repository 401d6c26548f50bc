"""Which hits are verified: `sample_rate` of them on average, more of those close to the
effective threshold (where a verdict can move it) and fewer confident ones, within a per-model
rate of shadow calls."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from gateway.config.cache import VerifyPolicy

_MEAN_ALPHA = 0.02  # how fast the running mean of boosts follows the hits


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float = field(default_factory=time.monotonic)


class Sampler:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._mean_boost: dict[str, float] = {}
        self._buckets: dict[str, _Bucket] = {}

    def probability(
        self, model: str, policy: VerifyPolicy, similarity: float, threshold: float
    ) -> float:
        """The chance this hit is verified. The boost of near-threshold hits is divided by its
        running mean over the model's hits, so the mean rate stays `sample_rate`."""
        if policy.sample_rate <= 0:
            return 0.0
        boost = policy.explore if similarity < threshold + policy.explore_band else 1.0
        mean = self._mean_boost.get(model, boost)
        mean += _MEAN_ALPHA * (boost - mean)
        self._mean_boost[model] = mean
        return min(1.0, policy.sample_rate * boost / mean)

    def draw(self, probability: float) -> bool:
        return probability > 0 and self._rng.random() < probability

    def take(self, model: str, policy: VerifyPolicy) -> bool:
        """One shadow call from the model's budget (`max_per_minute`, bursts up to it)."""
        now = time.monotonic()
        rate = policy.max_per_minute / 60.0
        bucket = self._buckets.get(model)
        if bucket is None:
            bucket = self._buckets[model] = _Bucket(float(policy.max_per_minute), now)
        bucket.tokens = min(float(policy.max_per_minute), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True
