"""`gateway route --explain-alias` as a user runs it (a subprocess): on the shipped config,
on tiers set by keep_quality and cheap_share, with a prompts file scored by the real MiniLM,
and the arguments and files it refuses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import run_gateway_cli

MODELS = [{"name": n, "provider": "d"} for n in ("small", "medium", "large")]


def config(tmp_path: Path, tiers: list[dict[str, Any]], embedder: str = "hash") -> Path:
    return write_config(
        tmp_path,
        {
            "providers": {"d": {"type": "demo"}},
            "models": MODELS,
            "cache": {"embedder": {"type": embedder}},
            "routing": {"aliases": {"auto": {"tiers": tiers}}},
        },
    )


def cut_lines(stdout: str, tier: int) -> dict[str, str]:
    """Tier `tier`'s line per variant."""
    block = stdout.split(f"  tier {tier} ", 1)[1].split("\n  tier ", 1)[0]
    return {line.split()[0]: line for line in block.splitlines()[1:] if line.startswith("    ")}


def test_the_shipped_demo_auto_keeps_95_percent() -> None:
    result = run_gateway_cli("route", "--explain-alias", "demo-auto")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "  tier 0 demo-cheap: keep_quality 0.95" in out
    assert "  tier 1 demo-strong: the rest" in out
    lines = cut_lines(out, 0)
    assert {"minilm", "features"} <= set(lines), out
    assert lines["minilm"].endswith("<-"), "the shipped embedder is MiniLM"
    for line in lines.values():
        kept = float(re.search(r"kept +([\d.]+)%", line).group(1))  # type: ignore[union-attr]
        taken = float(re.search(r"takes +([\d.]+)%", line).group(1))  # type: ignore[union-attr]
        assert kept >= 95.0 - 0.05 and 0 < taken < 100, line
    assert "Mixtral-8x7B cheap, GPT-4 strong" in out and "reference: " in out
    assert "not served" not in out


def test_the_shipped_auto_says_its_tiers_are_not_served_without_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = run_gateway_cli("route", "--explain-alias", "auto")
    assert result.returncode == 0, result.stderr
    assert "  tier 0 gpt-4o-mini: keep_quality 0.95" in result.stdout
    assert "note: tier 0 gpt-4o-mini is not served now: its provider 'openai'" in result.stdout


def test_tiers_set_in_quality_and_in_share(tmp_path: Path) -> None:
    tiers = [
        {"model": "small", "keep_quality": 0.97},
        {"model": "medium", "cheap_share": 0.9},
        {"model": "large"},
    ]
    result = run_gateway_cli(
        "route", "--explain-alias", "auto", "--config", str(config(tmp_path, tiers))
    )
    assert result.returncode == 0, result.stderr
    for variant, line in cut_lines(result.stdout, 1).items():
        below = re.search(r"cheaper +([\d.]+)%", line)
        assert below is not None and abs(float(below.group(1)) - 90.0) < 0.1, (variant, line)
    small = cut_lines(result.stdout, 0)
    assert all(
        float(re.search(r"kept +([\d.]+)%", line).group(1)) >= 96.95 for line in small.values()
    )  # type: ignore[union-attr]


def test_prompts_scored_by_minilm_split_between_the_tiers(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    easy = ["hi!", "thanks a lot", "What is the capital of France?"]
    hard = [
        "Prove step by step that the square root of 2 is irrational, then compare two proofs.",
        "Derive the closed form of the sum of k^3 for k = 1..n and prove it by induction.",
    ]
    prompts.write_text("\n".join(easy + hard) + "\n")
    tiers = [{"model": "small", "keep_quality": 0.95}, {"model": "large"}]
    path = config(tmp_path, tiers, embedder="minilm")
    result = run_gateway_cli(
        "route",
        "--explain-alias",
        "auto",
        "--prompts",
        str(prompts),
        "--config",
        str(path),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"your prompts: 5 from {prompts}, scored by the minilm variant" in out
    counts = [int(n) for n in re.findall(r"  tier \d (?:small|large): (\d+) \(", out)]
    assert sum(counts) == 5 and len(counts) == 2, out


def test_explain_and_explain_alias_are_one_option(tmp_path: Path) -> None:
    path = str(config(tmp_path, [{"model": "small", "keep_quality": 0.95}, {"model": "large"}]))
    short = run_gateway_cli("route", "--explain", "auto", "--config", path)
    long = run_gateway_cli("route", "--explain-alias", "auto", "--config", path)
    assert short.returncode == 0, short.stderr
    assert short.stdout == long.stdout and "  tier 0 small: keep_quality 0.95" in short.stdout
    # After a prompt, --explain asks for what `route PROMPT` prints anyway.
    flagged = run_gateway_cli("route", "what is 2+2?", "--explain", "--config", path)
    plain = run_gateway_cli("route", "what is 2+2?", "--config", path)
    assert flagged.returncode == 0, flagged.stderr
    assert flagged.stdout == plain.stdout and flagged.stdout.startswith("score: ")
    # A prompt given where the alias goes: said, with the way to explain a prompt.
    prompt = run_gateway_cli("route", "--explain", "what is 2+2?", "--config", path)
    assert prompt.returncode == 2 and 'to explain a prompt: gateway route "PROMPT"' in prompt.stderr


def test_bad_arguments_and_files_are_refused(tmp_path: Path) -> None:
    nothing = run_gateway_cli("route")
    assert nothing.returncode == 2 and "give a prompt, --request FILE, or --explain ALIAS" in (
        nothing.stderr
    )
    bare = run_gateway_cli("route", "--explain")
    assert bare.returncode == 2 and "--explain takes an ALIAS" in bare.stderr
    both = run_gateway_cli("route", "hi", "--explain-alias", "demo-auto")
    assert both.returncode == 2 and "takes no prompt" in both.stderr
    loose = run_gateway_cli("route", "hi", "--prompts", "x.txt")
    assert loose.returncode == 2 and "--prompts goes with --explain ALIAS" in loose.stderr
    unknown = run_gateway_cli("route", "--explain-alias", "nope")
    assert unknown.returncode == 2 and "unknown routing alias 'nope'" in unknown.stderr
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "hi"}\n{"text": "no prompt"}\n')
    refused = run_gateway_cli("route", "--explain-alias", "demo-auto", "--prompts", str(bad))
    assert refused.returncode == 2 and 'line 2: no "prompt" string' in refused.stderr


def test_mixed_kinds_out_of_order_fail_check_serve_and_the_report(tmp_path: Path) -> None:
    # keeping 50 % of quality is everything cheap: above the next tier's max_score 0.2
    tiers = [
        {"model": "small", "keep_quality": 0.5},
        {"model": "medium", "max_score": 0.2},
        {"model": "large"},
    ]
    path = str(config(tmp_path, tiers))
    check = run_gateway_cli("check", "--config", path)
    assert check.returncode == 1
    assert "routing.aliases.auto (scored by the" in check.stderr
    assert "tier 0 (keep_quality 0.5) gives the cut all" in check.stderr
    report = run_gateway_cli("route", "--explain-alias", "auto", "--config", path)
    assert report.returncode == 1 and "tiers must go from cheap to strong" in report.stderr
    serve = run_gateway_cli("serve", "--config", path, "--port", "0", timeout=30)
    assert serve.returncode == 1 and "error: routing.aliases.auto (scored by" in serve.stderr
    assert "Traceback" not in serve.stderr
