"""Tier cuts in user terms resolved through a variant's calibration: keep_quality and
cheap_share become score cuts, differently for each variant; mixed kinds that end up out of
order are refused at start-up, and routed on (cuts made to ascend) when only a policy has them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config import AliasConfig, build_settings, load_settings, parse_config
from gateway.context import RequestContext
from gateway.routing.calibration import EVERYTHING, NOTHING, Calibration
from gateway.routing.router import Router, tier_for
from gateway.routing.scorer import Score
from gateway.routing.thresholds import Thresholds, describe_cut, resolve_cuts


def curve(reference: str, scale: float) -> Calibration:
    """Share rises linearly with the cut up to `scale`; kept falls 1.0 -> 0.8 with it."""
    points = [{"cut": scale * i / 10, "share": i / 10, "kept": 1.0 - 0.02 * i} for i in range(11)]
    return Calibration.from_json({"reference": reference, "points": points})


# Two variants whose scores spread differently: the same target is a different cut for each.
CALIBRATIONS = {"minilm": curve("minilm data", 0.5), "features": curve("features data", 1.0)}


def alias(*tiers: dict[str, object]) -> AliasConfig:
    return AliasConfig.model_validate({"tiers": [*tiers, {"model": "strong"}]})


def test_each_kind_of_cut_resolves() -> None:
    config = alias(
        {"model": "a", "keep_quality": 0.95},  # kept 0.95 at share 0.25
        {"model": "b", "cheap_share": 0.6},
        {"model": "c", "max_score": 0.9},
    )
    assert resolve_cuts(config, CALIBRATIONS["features"]) == pytest.approx((0.25, 0.6, 0.9))
    assert resolve_cuts(config, CALIBRATIONS["minilm"]) == pytest.approx((0.125, 0.3, 0.9))


def test_a_raw_max_score_needs_no_calibration() -> None:
    config = alias({"model": "a", "max_score": 0.4})
    assert resolve_cuts(config, None) == (0.4,)
    assert Thresholds(None).cuts(config, "features") == (0.4,)
    with pytest.raises(ValueError, match="keep_quality needs the scorer's calibration"):
        resolve_cuts(alias({"model": "a", "keep_quality": 0.9}), None)


def test_targets_beyond_the_curve_take_nothing_or_everything() -> None:
    nothing = alias({"model": "a", "cheap_share": 0})
    assert resolve_cuts(nothing, CALIBRATIONS["features"]) == (NOTHING,)
    everything = alias({"model": "a", "keep_quality": 0.5})  # all cheap keeps 0.8
    assert resolve_cuts(everything, CALIBRATIONS["features"]) == (EVERYTHING,)
    assert (describe_cut(NOTHING), describe_cut(EVERYTHING), describe_cut(0.25)) == (
        "none (nothing goes here)",
        "all (every score goes here)",
        "0.250",
    )


def test_mixed_kinds_out_of_order_are_refused_naming_the_tiers() -> None:
    # keep 0.9 is a cut of 0.5 on the features curve, above the next tier's max_score 0.3
    config = alias({"model": "a", "keep_quality": 0.9}, {"model": "b", "max_score": 0.3})
    with pytest.raises(ValueError) as info:
        resolve_cuts(config, CALIBRATIONS["features"])
    assert str(info.value) == (
        "tiers must go from cheap to strong: tier 0 (keep_quality 0.9) gives the cut 0.500, "
        "above tier 1's (max_score 0.3: 0.300) on features data"
    )
    # the same tiers are in order for the minilm curve (keep 0.9 is a cut of 0.25 there)
    assert resolve_cuts(config, CALIBRATIONS["minilm"]) == pytest.approx((0.25, 0.3))
    thresholds = Thresholds(CALIBRATIONS.__getitem__)
    with pytest.raises(ValueError, match=r"routing\.aliases\.auto \(scored by the features"):
        thresholds.check({"auto": config}, ["minilm", "features"])
    thresholds.check({"auto": config}, ["minilm"])


def test_a_policys_out_of_order_cuts_route_on_raised_to_ascend(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = alias({"model": "a", "keep_quality": 0.9}, {"model": "b", "max_score": 0.3})
    with caplog.at_level(logging.ERROR, "gateway.routing"):
        cuts = Thresholds(CALIBRATIONS.__getitem__).cuts(config, "features")
    assert cuts == pytest.approx((0.5, 0.5)), "tier 1 takes nothing rather than a 500"
    assert "tier 0 (keep_quality 0.9)" in caplog.text


def test_cuts_are_resolved_once_per_alias_tiers_and_variant() -> None:
    asked: list[str] = []

    def calibration_of(variant: str) -> Calibration:
        asked.append(variant)
        return CALIBRATIONS[variant]

    thresholds = Thresholds(calibration_of)
    config = alias({"model": "a", "cheap_share": 0.5})
    for _ in range(3):
        assert thresholds.cuts(config, "minilm") == pytest.approx((0.25,))
        assert thresholds.cuts(config, "features") == pytest.approx((0.5,))
    assert asked == ["minilm", "features"]
    same_tiers_again = alias({"model": "a", "cheap_share": 0.5})
    assert thresholds.cuts(same_tiers_again, "minilm") == pytest.approx((0.25,))


def test_tier_for_takes_the_first_tier_whose_cut_holds_the_score() -> None:
    config = alias({"model": "a", "cheap_share": 0.3}, {"model": "b", "keep_quality": 0.9})
    thresholds = Thresholds(CALIBRATIONS.__getitem__)
    # features curve: cuts 0.3 and 0.5
    tiers = [tier_for(config, Score(v, {}), thresholds) for v in (0.1, 0.3, 0.31, 0.5, 0.51)]
    assert tiers == [0, 0, 1, 1, 2]


ROUTED = """
providers: {d: {type: demo}}
models: [{name: small, provider: d}, {name: medium, provider: d}, {name: large, provider: d}]
routing:
  aliases:
    auto: {tiers: [TIERS]}
"""


def routed(tiers: str) -> Router:
    text = ROUTED.replace("TIERS", tiers)
    return Router(build_settings(parse_config(text), "<t>", {}), None, lambda _: True)


def test_a_router_resolves_keep_quality_through_the_shipped_calibrations() -> None:
    router = routed("{model: small, keep_quality: 0.95}, {model: large}")
    config = router.settings.routing.aliases["auto"]
    for variant in router.scorer.model.variants:
        [cut] = router.thresholds.cuts(config, variant)
        share, kept = router.scorer.calibration(variant).at(cut)
        assert 0 < cut < 1 and 0 < share < 1 and kept == pytest.approx(0.95, abs=1e-6), variant


def test_a_router_refuses_tiers_whose_resolved_cuts_are_out_of_order() -> None:
    # keeping 50 % of quality sends everything cheap: above the next tier's max_score
    tiers = "{model: small, keep_quality: 0.5}, {model: medium, max_score: 0.1}, {model: large}"
    with pytest.raises(ValueError, match=r"routing\.aliases\.auto \(scored by the .* tier 0"):
        routed(tiers)


async def test_a_policys_own_thresholds_apply_to_its_tenants_requests(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        ROUTED.replace("TIERS", "{model: small, keep_quality: 0.95}, {model: large}")
    )
    policies = tmp_path / "policies"
    policies.mkdir()
    for tenant, share in (("frugal", 1), ("careful", 0)):
        (policies / f"{tenant}.yaml").write_text(
            f"match: {{tenants: [{tenant}]}}\n"
            f"routing: {{aliases: {{auto: {{tiers: [{{model: small, cheap_share: {share}}}, "
            "{model: large}]}}}\n"
        )
    router = Router(load_settings(tmp_path / "config.yaml"), None, lambda _: True)

    async def tier(tenant: str, text: str) -> int:
        ctx = RequestContext(request_id="r", endpoint="chat", tenant=tenant)
        body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
        return (await router.decide(ctx, "auto", body)).tier

    hard = "Prove step by step that the square root of 2 is irrational, then compare two proofs."
    assert await tier("anyone", "hi") == 0
    assert [await tier("frugal", t) for t in ("hi", hard)] == [0, 0], "cheap_share 1: all cheap"
    assert [await tier("careful", t) for t in ("hi", hard)] == [1, 1], "cheap_share 0: none"
