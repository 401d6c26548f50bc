"""One percentile definition, the same as numpy's default."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gateway.testing.harness.stats import Summary, fmt, median, percentile, ratio


@pytest.mark.parametrize("size", [1, 2, 3, 10, 101, 1000])
@pytest.mark.parametrize("pct", [0, 1, 25, 50, 90, 99, 99.9, 100])
def test_percentile_matches_numpy(size: int, pct: float) -> None:
    values = [random.Random(size).lognormvariate(0, 1) for _ in range(size)]
    assert percentile(values, pct) == pytest.approx(float(np.percentile(values, pct)))


def test_nan_is_dropped_and_nothing_gives_nan() -> None:
    assert percentile([1.0, math.nan, 3.0], 50) == 2.0
    assert math.isnan(percentile([], 50))
    assert math.isnan(median([math.nan]))


def test_summary_and_formatting() -> None:
    summary = Summary.of([float(v) for v in range(1, 101)])
    assert (summary.count, summary.p50, summary.max) == (100, 50.5, 100.0)
    assert summary.p99 == pytest.approx(99.01)
    assert fmt(math.nan) == "-" and fmt(1.234, ".1f") == "1.2"
    assert math.isnan(ratio(1.0, 0.0)) and ratio(3.0, 2.0) == 1.5
