"""bench/routing_quality.py end to end on the fixtures of tests/bench/data, with the hash
embedder: the plumbing (every dataset, section and number; the cache; errors), no quality
claim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import routing_quality
from routing_data import GRID, load_csv, random_curve
from routing_report import HELD_OUT, LENGTH, ROUTER, dataset_section, evaluate

DATA = Path(__file__).parent / "data"


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, Any]:
    out = tmp_path / "report.json"
    argv = [
        *("--gsm8k", str(DATA / "gsm8k_fixture.csv"), "--mmlu", str(DATA / "mmlu")),
        *("--csv", str(DATA / "conversations.csv"), "--cheap-column", "cheap"),
        *("--strong-column", "strong", "--embedder", "hash", "--held-out", "off"),
        *("--cache-dir", str(tmp_path / "cache"), "--json", str(out)),
        *("--bootstrap", "10", "--rounds", "1", *extra),
    ]
    assert routing_quality.main(argv) == 0
    return capsys.readouterr().out, json.loads(out.read_text())


def test_every_dataset_gets_its_curve_and_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, report = run(tmp_path, capsys)
    by_name = {d["name"]: d for d in report["datasets"]}
    assert list(by_name) == ["gsm8k", "mmlu", "conversations", "team"]
    for d in by_name.values():
        assert [p["share"] for p in d["curve"]] == GRID
        assert set(d["scorers"]) == {ROUTER, LENGTH}
        for s in d["scorers"].values():
            assert 0 <= s["best_share_at_95"] <= 1
            lo, hi = s["bootstrap_95ci"]["best_share_95"]
            assert lo <= hi
    assert [g["group"] for g in by_name["mmlu"]["groups"]] == ["cooking", "geometry"]
    assert [g["prompts"] for g in by_name["mmlu"]["groups"]] == [24, 24]
    assert "spearman_difficulty" in by_name["team"]["scorers"][ROUTER]
    assert by_name["team"]["fitted_on"] and not by_name["conversations"]["fitted_on"]
    # The random column is the exact expectation.
    data = load_csv(DATA / "conversations.csv", "cheap", "strong")
    expected = random_curve(len(data), data.cheap, data.strong)
    for point in by_name["conversations"]["curve"]:
        assert point["random"] == pytest.approx(expected[round(point["share"] * len(data))])
    for heading in ("### GSM8K: 40 prompts", "### MMLU: 48 prompts", "### conversations: 31"):
        assert heading in text
    assert "| cooking " in text and "cheap one with 1 - difficulty" in text
    assert "hash embedder: plumbing only" in text
    cpu = report["latency_us"]["4 large bodies"]["total_cpu"]
    assert 0 < cpu["p50"] <= cpu["p99"] <= cpu["max"]


def test_a_second_run_reads_every_embedding_from_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, first = run(tmp_path, capsys, "--skip", "team")
    _, second = run(tmp_path, capsys, "--skip", "team")
    # One of the 31 conversations ends on the assistant's turn: nothing to embed.
    assert first["embedding"]["embedded"] == 40 + 48 + 30
    assert second["embedding"]["embedded"] == 0
    assert second["embedding"]["from_cache"] == first["embedding"]["embedded"]
    assert second["datasets"] == first["datasets"]


def test_the_held_out_scores_get_their_own_rows_and_columns() -> None:
    data = load_csv(DATA / "conversations.csv", "cheap", "strong")
    oracle = data.strong - data.cheap
    scores = {ROUTER: np.zeros(len(data)), LENGTH: np.arange(len(data.prompts)) * 1.0}
    report = evaluate(data, scores | {HELD_OUT: oracle}, rounds=5)
    assert report["scorers"][HELD_OUT]["above_random_every_5pct"]
    assert report["scorers"][HELD_OUT]["above_random_every_10pct"]
    assert report["scorers"][HELD_OUT]["apgr"] > report["scorers"][ROUTER]["apgr"]
    assert "kept: held-out" in dataset_section(report)


def test_a_missing_file_or_a_bad_weight_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nowhere.csv")
    assert routing_quality.main(["--gsm8k", missing, "--embedder", "hash"]) == 2
    assert f"{missing}: no such file" in capsys.readouterr().err
    argv = ["--skip", "gsm8k", "--skip", "mmlu", "--embedder", "hash", "--weight", "nonsense=1"]
    assert routing_quality.main(argv) == 2
    assert "nonsense" in capsys.readouterr().err
