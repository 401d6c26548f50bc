"""The `--explain-alias` report's logic on calibrations built here: each tier's cut per
variant with the reference share and kept quality it gives, and reading a prompts file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import AliasConfig
from gateway.routing.alias_report import (
    PromptsError,
    describe_alias,
    describe_prompts,
    read_prompts,
)
from gateway.routing.calibration import Calibration


def curve(reference: str, scale: float) -> Calibration:
    """Share rises linearly with the cut up to `scale`; kept falls 1.0 -> 0.8 with it."""
    points = [{"cut": scale * i / 10, "share": i / 10, "kept": 1.0 - 0.02 * i} for i in range(11)]
    return Calibration.from_json({"reference": reference, "points": points})


CALIBRATIONS = {"minilm": curve("20 MMLU subjects", 0.5), "features": curve("20 MMLU subjects", 1)}


def alias(*tiers: dict[str, object]) -> AliasConfig:
    return AliasConfig.model_validate({"tiers": [*tiers, {"model": "strong"}]})


def test_each_tier_shows_its_setting_and_each_variants_cut_share_and_kept() -> None:
    config = alias({"model": "cheap", "keep_quality": 0.95})
    lines = describe_alias("auto", config, CALIBRATIONS, in_use="minilm")
    text = "\n".join(lines)
    assert "  tier 0 cheap: keep_quality 0.95" in lines
    # kept 0.95 at share 0.25 on both curves: cut 0.125 for minilm, 0.250 for features
    [minilm, features] = [line for line in lines if "cut 0." in line]
    assert minilm.split()[:3] == ["minilm", "cut", "0.125"] and "<-" in minilm
    assert features.split()[:3] == ["features", "cut", "0.250"] and not features.endswith("<-")
    assert "takes  25.0%" in minilm and "kept  95.0%" in minilm
    assert "  tier 1 strong: the rest" in lines
    assert text.count("takes  75.0%") == 2, "the strongest tier takes the rest, per variant"
    assert "reference pair (Mixtral-8x7B cheap, GPT-4 strong): for your models, an estimate" in text
    assert "reference: 20 MMLU subjects" in text


def test_three_tiers_of_different_kinds() -> None:
    config = alias({"model": "small", "cheap_share": 0.3}, {"model": "medium", "max_score": 0.8})
    lines = describe_alias("auto", config, {"features": CALIBRATIONS["features"]})
    small, medium, large = (line for line in lines if line.startswith("    features"))
    assert "cut 0.300" in small and "takes  30.0%" in small
    # max_score 0.8 is the same cut for every variant: 80 % at or below, 50 % of them here
    assert "cut 0.800" in medium and "takes  50.0%" in medium and "cheaper  80.0%" in medium
    assert "takes  20.0%" in large


def test_nothing_and_everything_cuts_read_as_words() -> None:
    nothing = describe_alias("a", alias({"model": "c", "cheap_share": 0}), CALIBRATIONS)
    assert any("cut none" in line and "takes   0.0%" in line for line in nothing)
    everything = describe_alias("a", alias({"model": "c", "keep_quality": 0.5}), CALIBRATIONS)
    assert any("cut all" in line and "takes 100.0%" in line for line in everything)


def test_the_share_of_your_prompts_per_tier() -> None:
    config = alias({"model": "cheap", "max_score": 0.3})
    lines = describe_prompts(config, [0, 0, 0, 1], "minilm", "p.txt")
    assert lines[:3] == [
        "your prompts: 4 from p.txt, scored by the minilm variant",
        "  tier 0 cheap: 3 (75.0%)",
        "  tier 1 strong: 1 (25.0%)",
    ]


def test_prompts_one_a_line_or_json_lines(tmp_path: Path) -> None:
    text = tmp_path / "p.txt"
    text.write_text("hi!\n\n  What is 2 + 2?  \n{not json, a prompt about braces}\n")
    assert read_prompts(text) == ["hi!", "What is 2 + 2?", "{not json, a prompt about braces}"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "hi!", "id": 1}\n\n{"prompt": "line one\\nline two"}\n')
    assert read_prompts(jsonl) == ["hi!", "line one\nline two"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no prompts"),
        ('{"prompt": "a"}\n{"prompt": 3}\n', r"line 2: no \"prompt\" string"),
        ('{"prompt": "a"}\n{oops\n', "line 2: not JSON"),
    ],
)
def test_a_bad_prompts_file_says_which_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(PromptsError, match=message):
        read_prompts(path)
    with pytest.raises(PromptsError, match="No such file"):
        read_prompts(tmp_path / "missing.txt")
