"""A calibration curve: read from model.json's format, refused when malformed, and turned
into cuts from a quality to keep or a share to send cheap."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gateway.routing.calibration import EVERYTHING, NOTHING, Calibration

# share rises with the cut; kept falls from 1.0, with a bump (kept is not monotone in real data)
POINTS = [
    {"cut": 0.05, "share": 0.0, "kept": 1.0},
    {"cut": 0.10, "share": 0.2, "kept": 0.99},
    {"cut": 0.20, "share": 0.4, "kept": 0.96},
    {"cut": 0.30, "share": 0.6, "kept": 0.93},
    {"cut": 0.40, "share": 0.8, "kept": 0.94},
    {"cut": 0.60, "share": 1.0, "kept": 0.85},
]
CURVE = Calibration.from_json({"reference": "a test curve", "points": POINTS})


def test_it_reads_the_shipped_format() -> None:
    assert CURVE.reference == "a test curve"
    assert CURVE.cuts == (0.05, 0.1, 0.2, 0.3, 0.4, 0.6)
    assert CURVE.shares[-1] == 1.0 and CURVE.kept[0] == 1.0


def test_at_interpolates_between_points_and_holds_beyond_them() -> None:
    assert CURVE.at(0.2) == pytest.approx((0.4, 0.96))
    assert CURVE.at(0.25) == pytest.approx((0.5, 0.945))
    assert CURVE.at(0.0) == (0.0, 1.0), "below the first point nothing goes cheap"
    assert CURVE.at(NOTHING) == (0.0, 1.0)
    assert CURVE.at(0.9) == CURVE.at(EVERYTHING) == (1.0, 0.85)


def test_cut_for_kept_is_the_highest_cut_that_keeps_the_target() -> None:
    # 0.95 is crossed between 0.20 (0.96) and 0.30 (0.93): a third of the way
    cut = CURVE.cut_for_kept(0.95)
    assert cut == pytest.approx(0.2 + 0.1 / 3)
    assert CURVE.at(cut)[1] == pytest.approx(0.95)
    # 0.935 is kept again at 0.40 (the bump): the highest such cut wins, past the dip
    assert CURVE.cut_for_kept(0.935) > 0.4
    assert CURVE.at(CURVE.cut_for_kept(0.935))[1] == pytest.approx(0.935)
    assert CURVE.cut_for_kept(0.8) == EVERYTHING, "all cheap keeps 0.85: everything goes"
    assert CURVE.cut_for_kept(1.0) == 0.05, "only the share-0 point keeps it all"


def test_cut_for_kept_is_nothing_when_even_the_first_point_loses_too_much() -> None:
    lossy = Calibration.from_json(
        {"reference": "r", "points": [{"cut": 0.1, "share": 0.3, "kept": 0.9}]}
    )
    assert lossy.cut_for_kept(0.95) == NOTHING
    assert lossy.at(NOTHING) == (0.0, 1.0)


def test_cut_for_share_sends_at_least_that_share_cheap() -> None:
    assert CURVE.cut_for_share(0.5) == pytest.approx(0.25)
    assert CURVE.at(CURVE.cut_for_share(0.7))[0] == pytest.approx(0.7)
    assert CURVE.cut_for_share(0.0) == NOTHING
    assert CURVE.cut_for_share(1.0) == EVERYTHING
    for share in (0.01, 0.33, 0.99):
        assert CURVE.at(CURVE.cut_for_share(share))[0] >= share - 1e-9


def test_tied_cuts_where_many_prompts_score_alike() -> None:
    # a features-only model gives many prompts the same score: the share jumps at that cut
    tied = Calibration.from_json(
        {
            "reference": "r",
            "points": [
                {"cut": 0.1, "share": 0.0, "kept": 1.0},
                {"cut": 0.2, "share": 0.5, "kept": 0.97},
                {"cut": 0.2, "share": 0.5, "kept": 0.97},
                {"cut": 0.3, "share": 1.0, "kept": 0.9},
            ],
        }
    )
    assert tied.at(0.2) == pytest.approx((0.5, 0.97))
    assert tied.cut_for_share(0.5) == pytest.approx(0.2)
    assert tied.cut_for_kept(0.97) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"points": POINTS}, "reference"),
        ({"reference": "r", "points": []}, "non-empty"),
        ({"reference": "r", "points": [{"cut": 0.1, "share": 0.5}]}, r"points\[0\]\.kept"),
        ({"reference": "r", "points": [{"cut": "x", "share": 0, "kept": 1}]}, r"points\[0\]\.cut"),
        (
            {"reference": "r", "points": [{"cut": math.nan, "share": 0, "kept": 1}]},
            "finite number",
        ),
        ({"reference": "r", "points": [{"cut": 0.1, "share": 1.5, "kept": 1}]}, "share 1.5"),
        ({"reference": "r", "points": [{"cut": 0.1, "share": 0.5, "kept": -0.1}]}, "kept -0.1"),
        ({"reference": "r", "points": [POINTS[2], POINTS[1]]}, r"points\[1\]\.cut .*ascend"),
        (
            {"reference": "r", "points": [{**POINTS[1], "share": 0.5}, POINTS[2] | {"share": 0.4}]},
            r"points\[1\]\.share .*fewer",
        ),
        (
            {"reference": "r", "points": [POINTS[1], {**POINTS[1], "share": 0.3}]},
            "same cut",
        ),
    ],
)
def test_a_bad_calibration_is_refused_saying_what_is_wrong(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Calibration.from_json(data)


def test_targets_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="keep_quality"):
        CURVE.cut_for_kept(0.0)
    with pytest.raises(ValueError, match="cheap_share"):
        CURVE.cut_for_share(1.5)
