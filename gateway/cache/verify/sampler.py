"""Which hits are verified: `sample_rate` of them on average, more of those close to the
effective threshold (where a verdict can move it) and fewer confident ones, within a rate of
shadow calls per (tenant, model): one tenant's hits spend its own budget, never another's."""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gateway.config.cache import VerifyPolicy

_MEAN_ALPHA = 0.02  # how fast the running mean of boosts follows the hits
MAX_KEYS = 4096  # (tenant, model) budgets held; the least recently used forgotten first


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float = field(default_factory=time.monotonic)


class Sampler:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._mean_boost: OrderedDict[str, float] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def probability(
        self, model: str, policy: VerifyPolicy, similarity: float, threshold: float
    ) -> float:
        """The chance this hit is verified. The boost of near-threshold hits is divided by its
        running mean over the key's hits, so the mean rate stays `sample_rate`. `model`: the
        window's key (ledger.window_key: a tenant's hits on a model)."""
        if policy.sample_rate <= 0:
            return 0.0
        boost = policy.explore if similarity < threshold + policy.explore_band else 1.0
        mean = self._mean_boost.get(model, boost)
        mean += _MEAN_ALPHA * (boost - mean)
        self._mean_boost[model] = mean
        _bound(self._mean_boost, model)
        return min(1.0, policy.sample_rate * boost / mean)

    def draw(self, probability: float) -> bool:
        return probability > 0 and self._rng.random() < probability

    def take(self, model: str, policy: VerifyPolicy) -> bool:
        """One shadow call from the key's budget (`max_per_minute`, bursts up to it): a
        tenant's on a model, per replica."""
        now = time.monotonic()
        rate = policy.max_per_minute / 60.0
        bucket = self._buckets.get(model)
        if bucket is None:
            bucket = self._buckets[model] = _Bucket(float(policy.max_per_minute), now)
        _bound(self._buckets, model)
        bucket.tokens = min(float(policy.max_per_minute), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True


def _bound(table: OrderedDict[str, Any], key: str) -> None:
    table.move_to_end(key)
    while len(table) > MAX_KEYS:
        table.popitem(last=False)
