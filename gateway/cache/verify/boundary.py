"""The effective threshold: the lowest similarity whose hits stay within the error budget.

From the model's verdicts (served hits and explored candidates, each weighted as in
estimate.py): for each threshold t on a grid from the configured one up, the verdicts at or
above t stand for the hits a threshold of t would serve, so their weighted wrong share is what
t would cost. The effective threshold is the lowest t whose share is within budget on enough
evidence. It rises at once when the evidence says so and falls back one small step at a time,
so a lucky run of verdicts does not reopen the cache all at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.cache.verify.estimate import Observation

STEP = 0.0025  # the grid of thresholds
MIN_EVIDENCE = 20.0  # effective verdicts at or above a threshold before it is judged
RISE_STEP = 0.01  # over budget, and no threshold proven within it: rise this much
FALL_STEP = 0.0025  # the most the threshold falls per decision
CEILING = 0.995  # never higher: a cache that serves nothing is a cache turned off
HALF_LIFE = 1000.0  # verdicts after which a verdict counts half (see Regions)


@dataclass(frozen=True, slots=True)
class Region:
    """The verdicts at or above one threshold."""

    threshold: float
    verdicts: int
    wrong_share: float | None  # weighted; None without verdicts
    effective_n: float


@dataclass(frozen=True, slots=True)
class Decision:
    threshold: float
    reason: str  # why it moved (or "held")
    evidence: Region  # the verdicts at or above the new threshold


class Regions:
    """Weighted sums of the verdicts above each similarity, for quick questions per t. Each
    verdict's weight halves every HALF_LIFE newer verdicts: what a few early verdicts said
    (at a weight of 1 / sample_rate each) fades as evidence accrues, and a change in the
    traffic shows."""

    def __init__(self, observations: Sequence[Observation], judge_agrees: float = 1.0) -> None:
        """`judge_agrees`: how often the judge agrees on a control (an answer right by
        construction); each region's wrong share is corrected by it (estimate.corrected)."""
        self._judge_agrees = judge_agrees
        n = len(observations)
        decayed = [
            (o.similarity, o.weight * 0.5 ** ((n - 1 - i) / HALF_LIFE), o.agree)
            for i, o in enumerate(observations)
        ]
        ordered = sorted(decayed, key=lambda o: o[0])
        self._similarities = [similarity for similarity, _, _ in ordered]
        # suffix sums: from index i to the end
        self._count = list(range(n, -1, -1))
        self._total = [0.0] * (n + 1)
        self._squares = [0.0] * (n + 1)
        self._wrong = [0.0] * (n + 1)
        for i in range(n - 1, -1, -1):
            _, weight, agree = ordered[i]
            self._total[i] = self._total[i + 1] + weight
            self._squares[i] = self._squares[i + 1] + weight * weight
            self._wrong[i] = self._wrong[i + 1] + (0.0 if agree else weight)

    def at(self, threshold: float) -> Region:
        i = bisect.bisect_left(self._similarities, threshold - 1e-9)
        total, squares = self._total[i], self._squares[i]
        if total <= 0:
            return Region(threshold, 0, None, 0.0)
        agreeing = 1.0 - self._wrong[i] / total
        wrong = max(0.0, 1.0 - min(1.0, agreeing / self._judge_agrees))
        return Region(threshold, self._count[i], wrong, total * total / squares)


def decide(
    current: float,
    base: float,
    budget: float,
    observations: Sequence[Observation],
    judge_agrees: float = 1.0,
) -> Decision:
    """The next effective threshold for a model whose configured one is `base`, from its
    served and explored verdicts (controls only correct them, through `judge_agrees`)."""
    regions = Regions([o for o in observations if o.kind != "control"], judge_agrees)
    grid = _grid(base)
    proven = next((t for t in grid if _within(regions.at(t), budget)), None)
    here = regions.at(current)
    if proven is None:
        over = here.effective_n >= MIN_EVIDENCE and (here.wrong_share or 0.0) > budget
        if over and current < CEILING:
            new = min(CEILING, _snap(current + RISE_STEP))
            return Decision(new, "over budget, no threshold proven within it", regions.at(new))
        return Decision(current, "held", here)
    if proven > current + 1e-9:
        return Decision(
            proven, "over budget: rose to the lowest threshold within it", regions.at(proven)
        )
    if proven < current - 1e-9:
        new = max(proven, _snap(current - FALL_STEP))
        return Decision(new, "within budget below: fell one step", regions.at(new))
    return Decision(current, "held", here)


def _within(region: Region, budget: float) -> bool:
    return region.effective_n >= MIN_EVIDENCE and (region.wrong_share or 0.0) <= budget


def _grid(base: float) -> list[float]:
    steps = max(0, round((CEILING - base) / STEP))
    return [base] + [_snap(base + STEP * i) for i in range(1, steps + 1)]


def _snap(value: float) -> float:
    return round(value, 4)
