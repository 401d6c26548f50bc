"""The effective threshold: the lowest one within budget on enough evidence; rises at once,
falls a step at a time."""

from __future__ import annotations

import random

import pytest

from gateway.cache.verify import boundary
from gateway.cache.verify.estimate import Observation


def _verdicts(
    rng: random.Random, n: int, wrong_below: float, wrong_share: float
) -> list[Observation]:
    """Hits spread over 0.94..1.0: wrong `wrong_share` of the time below `wrong_below`."""
    found = []
    for _ in range(n):
        s = rng.uniform(0.94, 1.0)
        agree = not (s < wrong_below and rng.random() < wrong_share)
        found.append(Observation(s, agree, 1.0, "served", 0.0))
    return found


def test_without_evidence_the_threshold_holds() -> None:
    decision = boundary.decide(0.94, 0.94, 0.05, [])
    assert decision.threshold == 0.94 and decision.reason == "held"


def test_within_budget_at_the_configured_threshold_it_holds() -> None:
    verdicts = _verdicts(random.Random(1), 500, 0.96, 0.05)
    assert boundary.decide(0.94, 0.94, 0.05, verdicts).threshold == 0.94


def test_over_budget_it_rises_to_the_lowest_threshold_within_it() -> None:
    verdicts = _verdicts(random.Random(2), 2000, 0.96, 0.5)
    decision = boundary.decide(0.94, 0.94, 0.05, verdicts)
    # wrong half the time below 0.96: within 5 % only from about 0.955 up
    assert 0.95 <= decision.threshold <= 0.962
    region = decision.evidence
    assert region.wrong_share is not None and region.wrong_share <= 0.05
    lower = boundary.Regions(verdicts).at(decision.threshold - boundary.STEP)
    assert lower.wrong_share is not None and lower.wrong_share > 0.05


@pytest.mark.parametrize("budget", [0.02, 0.05, 0.10])
def test_a_tighter_budget_needs_a_higher_threshold(budget: float) -> None:
    verdicts = _verdicts(random.Random(3), 3000, 0.98, 0.3)
    loose = boundary.decide(0.94, 0.94, 0.2, verdicts).threshold
    tight = boundary.decide(0.94, 0.94, budget, verdicts).threshold
    assert tight >= loose


def test_it_falls_back_one_step_at_a_time() -> None:
    verdicts = _verdicts(random.Random(4), 1000, 0.0, 0.0)  # never wrong
    decision = boundary.decide(0.97, 0.94, 0.05, verdicts)
    assert decision.threshold == pytest.approx(0.97 - boundary.FALL_STEP)
    assert decision.reason.startswith("within budget below")


def test_over_budget_everywhere_it_climbs_but_not_past_the_ceiling() -> None:
    verdicts = [Observation(0.999, False, 1.0, "served", 0.0)] * 50
    threshold = 0.94
    for _ in range(20):
        threshold = boundary.decide(threshold, 0.94, 0.05, verdicts).threshold
    assert threshold == boundary.CEILING


def test_few_verdicts_do_not_move_it() -> None:
    verdicts = [Observation(0.95, False, 1.0, "served", 0.0)] * int(boundary.MIN_EVIDENCE - 1)
    assert boundary.decide(0.94, 0.94, 0.05, verdicts).threshold == 0.94


def test_a_judge_that_errs_on_controls_does_not_raise_the_threshold_by_itself() -> None:
    """Right hits everywhere, but the judge calls a fifth of them different: uncorrected the
    threshold climbs; with the controls' agreement (0.8) it holds."""
    rng = random.Random(5)
    verdicts = [
        Observation(rng.uniform(0.94, 1.0), rng.random() < 0.8, 1.0, "served", 0.0)
        for _ in range(1000)
    ]
    controls = [Observation(1.0, rng.random() < 0.8, 1.0, "control", 0.0) for _ in range(200)]
    assert boundary.decide(0.94, 0.94, 0.05, verdicts).threshold > 0.94
    agrees = sum(o.agree for o in controls) / len(controls)
    held = boundary.decide(0.94, 0.94, 0.05, verdicts + controls, agrees)
    assert held.threshold == 0.94
