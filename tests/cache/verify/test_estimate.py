"""The precision estimate: weighted by the chance of being verified, with Wilson's interval."""

from __future__ import annotations

import random

import pytest

from gateway.cache.verify.estimate import Observation, corrected, precision, wilson


def _obs(agree: bool, weight: float = 1.0, similarity: float = 0.96) -> Observation:
    return Observation(similarity, agree, weight, "served", 0.0)


def test_no_verdict_has_no_estimate() -> None:
    estimate = precision([])
    assert (estimate.verified, estimate.point, estimate.lower) == (0, None, None)


def test_equal_weights_give_the_plain_share_and_wilson() -> None:
    observations = [_obs(True)] * 90 + [_obs(False)] * 10
    estimate = precision(observations)
    assert estimate.point == pytest.approx(0.9)
    assert estimate.effective_n == pytest.approx(100)
    lower, upper = wilson(0.9, 100)
    assert (estimate.lower, estimate.upper) == (pytest.approx(lower), pytest.approx(upper))
    # Wilson's interval for 90/100 (a textbook value): 0.8256 .. 0.9448
    assert lower == pytest.approx(0.8256, abs=1e-3) and upper == pytest.approx(0.9448, abs=1e-3)
    assert estimate.disagreements == 10


def test_all_agreeing_still_has_a_lower_bound_below_one() -> None:
    estimate = precision([_obs(True)] * 30)
    assert estimate.point == 1.0
    assert estimate.lower is not None and 0.85 < estimate.lower < 0.9


def test_weights_estimate_the_hits_served_not_the_hits_verified() -> None:
    """Hits near the threshold (wrong a third of the time) are verified four times as often as
    confident ones (always right): unweighted, the verified ones understate precision."""
    rng = random.Random(7)
    served, verified = [], []
    for _ in range(40_000):
        near = rng.random() < 0.3
        right = rng.random() >= (1 / 3 if near else 0.0)
        served.append(right)
        chance = 0.4 if near else 0.1
        if rng.random() < chance:
            verified.append(_obs(right, 1 / chance))
    truth = sum(served) / len(served)
    weighted = precision(verified)
    plain = sum(o.agree for o in verified) / len(verified)
    assert weighted.point == pytest.approx(truth, abs=0.01)
    assert abs(plain - truth) > 0.05
    # unequal weights count for fewer trials than there are verdicts
    assert weighted.effective_n < len(verified)
    assert weighted.lower is not None and weighted.lower < truth < (weighted.upper or 0)


@pytest.mark.parametrize("n", [10, 100, 1000])
def test_the_interval_covers_the_truth_about_95_percent_of_the_time(n: int) -> None:
    rng = random.Random(n)
    truth, trials, covered = 0.93, 400, 0
    for _ in range(trials):
        observations = [_obs(rng.random() < truth) for _ in range(n)]
        estimate = precision(observations)
        assert estimate.lower is not None and estimate.upper is not None
        covered += estimate.lower <= truth <= estimate.upper
    assert covered / trials > 0.90


def test_controls_take_the_judges_own_false_different_out() -> None:
    """A judge that calls one right answer in four "different" (controls: exact hits) reads
    precision 0.75 * true; corrected, the estimate is the true share again."""
    rng = random.Random(11)
    truth, judge_agrees = 0.9, 0.75
    served = [_obs(rng.random() < truth and rng.random() < judge_agrees) for _ in range(4000)]
    controls = [_obs(rng.random() < judge_agrees) for _ in range(1000)]
    raw, judge = precision(served), precision(controls)
    assert raw.point == pytest.approx(truth * judge_agrees, abs=0.02)
    fixed = corrected(raw, judge)
    assert fixed.point == pytest.approx(truth, abs=0.03)
    assert fixed.lower is not None and fixed.upper is not None
    assert fixed.lower < truth < fixed.upper
    # too few controls: left as it is
    assert corrected(raw, precision(controls[:10])) == raw
