"""The precision of served semantic hits, from the verified ones, with honest uncertainty.

Hits are verified at unequal rates (those near the threshold more often), so each verdict is
weighted by the inverse of the probability it had of being verified (Horvitz-Thompson): the
estimate is of the hits served, not of the hits verified. The interval is Wilson's at 95 %,
on the effective sample size of the weights (Kish), which is the count when rates are equal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Z95 = 1.959963984540054

Kind = Literal["served", "explored", "control"]
MIN_CONTROLS = 20  # control verdicts before the judge's own error is taken out


@dataclass(frozen=True, slots=True)
class Observation:
    """One verdict: a served hit that was verified, a candidate the effective threshold held
    back whose answer was compared with the fresh one (explored: no shadow call), or an exact
    hit verified as a control (its answer is right by construction: a "different" there is
    the judge's own error, the rewording a model does between two answers)."""

    similarity: float  # the query's cosine to the entry
    agree: bool
    weight: float  # 1 / the probability of being verified
    kind: Kind
    at: float  # time.time() of the verdict


@dataclass(frozen=True, slots=True)
class Estimate:
    verified: int  # verdicts counted
    disagreements: int
    point: float | None  # precision; None before the first verdict
    lower: float | None  # the lower end of the 95 % interval
    upper: float | None
    effective_n: float

    def as_json(self) -> dict[str, float | int | None]:
        return {
            "verified": self.verified,
            "disagreements": self.disagreements,
            "point": _round(self.point),
            "lower": _round(self.lower),
            "upper": _round(self.upper),
            "effective_n": round(self.effective_n, 1),
        }


def corrected(served: Estimate, judge: Estimate) -> Estimate:
    """The served hits' precision with the judge's false "different" taken out: the judge
    agrees on a right hit only as often as on a control, so precision = agreeing share /
    the controls' agreeing share (assuming it does not call a wrong hit the same). The
    interval is widened by the controls' own. Unchanged until MIN_CONTROLS controls."""
    if (
        served.point is None
        or served.lower is None
        or served.upper is None
        or judge.verified < MIN_CONTROLS
        or not judge.point
        or not judge.lower
        or not judge.upper
    ):
        return served
    return Estimate(
        served.verified,
        served.disagreements,
        min(1.0, served.point / judge.point),
        min(1.0, served.lower / judge.upper),
        min(1.0, served.upper / judge.lower),
        served.effective_n,
    )


def precision(observations: Iterable[Observation]) -> Estimate:
    """The weighted share of agreeing verdicts among `observations`, and its 95 % interval."""
    count = wrong = 0
    total = agreeing = squares = 0.0
    for obs in observations:
        count += 1
        total += obs.weight
        squares += obs.weight * obs.weight
        if obs.agree:
            agreeing += obs.weight
        else:
            wrong += 1
    if count == 0 or total <= 0:
        return Estimate(0, 0, None, None, None, 0.0)
    point = agreeing / total
    n = total * total / squares
    lower, upper = wilson(point, n)
    return Estimate(count, wrong, point, lower, upper, n)


def wilson(share: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a share observed over `n` trials."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
