"""The one percentile and median every test and benchmark report uses.

Percentiles interpolate linearly between the two nearest ranks (numpy's default, so figures
match earlier reports computed with `np.percentile`); the median is the 50th percentile. NaN
values (a round that measured nothing) are dropped first; an empty input gives NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def _clean(values: Iterable[float]) -> list[float]:
    return sorted(v for v in values if not math.isnan(v))


def percentile(values: Iterable[float], pct: float) -> float:
    """The `pct`-th percentile (0-100) of `values`, in their own unit."""
    ordered = _clean(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * min(max(pct, 0.0), 100.0) / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Iterable[float]) -> float:
    return percentile(values, 50.0)


def ratio(value: float, baseline: float) -> float:
    """`value / baseline`, NaN when either is missing or the baseline is zero."""
    if math.isnan(value) or math.isnan(baseline) or baseline == 0:
        return math.nan
    return value / baseline


@dataclass(frozen=True)
class Summary:
    """Latency figures of one set of samples."""

    count: int
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        clean = _clean(values)
        return cls(
            count=len(clean),
            p50=percentile(clean, 50),
            p90=percentile(clean, 90),
            p99=percentile(clean, 99),
            max=clean[-1] if clean else math.nan,
        )


def fmt(value: float, spec: str = ".2f") -> str:
    """`value` formatted by `spec`, or "-" for NaN."""
    return "-" if math.isnan(value) else format(value, spec)
