"""A tier's cut in config: max_score, keep_quality or cheap_share, exactly one on every tier but
the last; a wrong one is refused naming the field and its line."""

from __future__ import annotations

import pytest

from gateway.config.loading import ConfigError, parse_config

HEAD = """\
providers: {d: {type: demo}}
models:
  - {name: a, provider: d}
  - {name: b, provider: d}
  - {name: c, provider: d}
routing:
  aliases:
    auto:
      tiers:
"""


def problems(tiers: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(HEAD + tiers)
    return info.value.problems


@pytest.mark.parametrize(
    "tiers",
    [
        "        - {model: a, max_score: 0.2}\n        - {model: b}\n",
        "        - {model: a, keep_quality: 0.95}\n        - {model: b}\n",
        "        - {model: a, cheap_share: 0.6}\n        - {model: b}\n",
        # mixed kinds: compared once the calibration resolves them (gateway.routing.thresholds)
        "        - {model: a, keep_quality: 0.99}\n"
        "        - {model: b, max_score: 0.3}\n"
        "        - {model: c}\n",
        "        - {model: c}\n",
    ],
    ids=["max_score", "keep_quality", "cheap_share", "mixed", "one-tier"],
)
def test_each_way_of_setting_a_cut_loads(tiers: str) -> None:
    parse_config(HEAD + tiers)


def test_two_ways_on_one_tier_are_refused_naming_the_second() -> None:
    [problem] = problems(
        "        - {model: a, max_score: 0.2, keep_quality: 0.95}\n        - {model: b}\n"
    )
    assert problem == (
        "routing.aliases.auto.tiers[0].keep_quality (line 10): set only one of max_score, "
        "keep_quality: each is a way to set the cut"
    )


def test_a_tier_but_the_last_without_a_cut_is_refused() -> None:
    [problem] = problems("        - {model: a}\n        - {model: b}\n")
    assert problem.startswith("routing.aliases.auto.tiers[0] (line 10): every tier but the last")
    assert "max_score, keep_quality or cheap_share" in problem


def test_the_last_tier_takes_the_rest_and_sets_no_cut() -> None:
    [problem] = problems(
        "        - {model: a, max_score: 0.2}\n        - {model: b, cheap_share: 1}\n"
    )
    assert problem == (
        "routing.aliases.auto.tiers[1].cheap_share (line 11): the last tier takes the rest: "
        "it sets no cut"
    )


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ("max_score: 0.5", "max_score: 0.2", "max_score increasing"),
        ("cheap_share: 0.6", "cheap_share: 0.3", "cheap_share increasing"),
        ("keep_quality: 0.9", "keep_quality: 0.97", "keep_quality decreasing"),
    ],
)
def test_cuts_of_one_kind_must_go_from_cheap_to_strong(
    first: str, second: str, message: str
) -> None:
    tiers = f"        - {{model: a, {first}}}\n        - {{model: b, {second}}}\n"
    [problem] = problems(tiers + "        - {model: c}\n")
    assert problem.endswith(f"tiers must go from cheap to strong: {message}")


@pytest.mark.parametrize(
    ("field", "value"),
    [("keep_quality", 0), ("keep_quality", 1.2), ("cheap_share", -0.1), ("max_score", 2)],
)
def test_out_of_range_values_are_refused_naming_the_field(field: str, value: float) -> None:
    [problem] = problems(f"        - {{model: a, {field}: {value}}}\n        - {{model: b}}\n")
    assert problem.startswith(f"routing.aliases.auto.tiers[0].{field} (line 10): ")
