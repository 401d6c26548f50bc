"""What a score cut means on reference data: the share of prompts it sends cheap and the
quality kept when they go there. A user says "keep 95 % of strong quality" or "send at least
60 % cheap"; the calibration turns that into the cut a tier's `max_score` would be.

A calibration is a curve of points measured on the scorer's reference data (model.json): at
`cut`, `share` of the reference prompts score at or below it (routed cheap with that cut) and
`kept` is the quality kept relative to always-strong when they are. Between points it is
linear in the cut; below the first point nothing goes cheap (share 0, kept 1), above the last
the last point holds.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOTHING = -math.inf  # a cut no score is at or below: the tier takes nothing
EVERYTHING = math.inf  # a cut every score is at or below: the tier takes the rest


@dataclass(frozen=True, slots=True)
class Calibration:
    reference: str  # what data the points were measured on, for people reading a report
    cuts: tuple[float, ...]  # non-decreasing
    shares: tuple[float, ...]  # non-decreasing, in [0, 1]
    kept: tuple[float, ...]  # in [0, 1]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        """From `{"reference": "...", "points": [{"cut", "share", "kept"}, ...]}`; a bad one is a
        ValueError that says which point and what is wrong."""
        reference = data.get("reference")
        if not isinstance(reference, str) or not reference.strip():
            raise ValueError("calibration: `reference` must say what data it was measured on")
        points = data.get("points")
        if not isinstance(points, Sequence) or isinstance(points, str) or not points:
            raise ValueError("calibration: `points` must be a non-empty list")
        cuts, shares, kept = [], [], []
        for n, point in enumerate(points):
            if not isinstance(point, Mapping):
                raise ValueError(f"calibration: points[{n}] is not an object")
            values = [_number(point, name, n) for name in ("cut", "share", "kept")]
            cuts.append(values[0])
            shares.append(values[1])
            kept.append(values[2])
        _check(cuts, shares, kept)
        return cls(reference, tuple(cuts), tuple(shares), tuple(kept))

    def at(self, cut: float) -> tuple[float, float]:
        """(share, kept) with this cut: the share of reference prompts at or below it, and the
        quality kept when they go cheap."""
        right = bisect_right(self.cuts, cut)
        if right == 0:
            return 0.0, 1.0
        if right == len(self.cuts):
            return self.shares[-1], self.kept[-1]
        left = right - 1
        x0, x1 = self.cuts[left], self.cuts[right]
        t = (cut - x0) / (x1 - x0)  # x1 > cut >= x0, so no division by zero
        return (
            self.shares[left] + t * (self.shares[right] - self.shares[left]),
            self.kept[left] + t * (self.kept[right] - self.kept[left]),
        )

    def cut_for_kept(self, target: float) -> float:
        """The highest cut whose kept quality is still at least `target`: the biggest cheap
        share that keeps it on the reference. `NOTHING` if no point keeps it (the first point
        already loses too much), `EVERYTHING` if even all-cheap keeps it."""
        if not 0 < target <= 1:
            raise ValueError(f"keep_quality must be in (0, 1], not {target}")
        last = max((i for i, k in enumerate(self.kept) if k >= target), default=None)
        if last is None:
            return NOTHING
        if last == len(self.cuts) - 1:
            return EVERYTHING if self.shares[-1] >= 1 else self.cuts[-1]
        # kept crosses the target between this point and the next: where, on the line
        k0, k1 = self.kept[last], self.kept[last + 1]
        x0, x1 = self.cuts[last], self.cuts[last + 1]
        return x0 + (x1 - x0) * (k0 - target) / (k0 - k1)

    def cut_for_share(self, share: float) -> float:
        """The lowest cut at or below which `share` of the reference prompts fall (so at most
        `1 - share` score above it). `NOTHING` for 0, `EVERYTHING` for 1."""
        if not 0 <= share <= 1:
            raise ValueError(f"cheap_share must be in [0, 1], not {share}")
        if share == 0:
            return NOTHING
        if share >= 1:
            return EVERYTHING
        first = next((i for i, s in enumerate(self.shares) if s >= share), None)
        if first is None:  # the data never reaches it: as much as it can say
            return self.cuts[-1]
        if first == 0:
            return self.cuts[0]
        s0, s1 = self.shares[first - 1], self.shares[first]
        x0, x1 = self.cuts[first - 1], self.cuts[first]
        return x0 + (x1 - x0) * (share - s0) / (s1 - s0)  # s1 >= share > s0


def _number(point: Mapping[str, Any], name: str, n: int) -> float:
    value = point.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"calibration: points[{n}].{name} must be a finite number, not {value!r}")
    return float(value)


def _check(cuts: list[float], shares: list[float], kept: list[float]) -> None:
    for n in range(len(cuts)):
        for name, values in (("share", shares), ("kept", kept)):
            if not 0 <= values[n] <= 1:
                raise ValueError(f"calibration: points[{n}].{name} {values[n]} is not in [0, 1]")
        if n and cuts[n] < cuts[n - 1]:
            raise ValueError(
                f"calibration: points[{n}].cut {cuts[n]} is below the one before "
                f"({cuts[n - 1]}): cuts must ascend"
            )
        if n and shares[n] < shares[n - 1]:
            raise ValueError(
                f"calibration: points[{n}].share {shares[n]} is below the one before "
                f"({shares[n - 1]}): a higher cut cannot send fewer prompts cheap"
            )
        if n and cuts[n] == cuts[n - 1] and shares[n] != shares[n - 1]:
            raise ValueError(
                f"calibration: points[{n - 1}] and [{n}] have the same cut {cuts[n]} but "
                "different shares"
            )
