"""The CLI as a user runs it: `python -m gateway check|serve` in a subprocess."""

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_check_accepts_the_shipped_config() -> None:
    result = _gateway("check")
    assert result.returncode == 0, result.stderr
    assert "config.yaml: OK" in result.stdout


def test_check_names_each_bad_field_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "server: {port: -1}\nproviders: {d: {type: demo}}\nmodels: [{name: x, provider: d}]\n"
        "extra: 1\n"
    )
    result = _gateway("check", "--config", str(bad))
    assert result.returncode == 1
    assert "server.port (line 1): Input should be greater than or equal to 0" in result.stderr
    assert "extra (line 4): Extra inputs are not permitted" in result.stderr


def test_serve_prints_where_it_listens_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    shipped = (ROOT / "config.yaml").read_text()
    config.write_text(shipped.replace("data/cache.sqlite3", str(tmp_path / "cache.sqlite3")))
    with subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", "0", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            assert match, line
            banner = "".join(proc.stdout.readline() for _ in range(3))
            assert "serving models: demo" in banner
            with urllib.request.urlopen(match.group(1) + "/readyz", timeout=10) as response:
                assert json.load(response)["status"] == "ready"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            proc.kill()


def test_check_imports_tool_rule_hooks(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "providers: {d: {type: demo}}\nmodels: [{name: m, provider: d}]\n"
        'guard: {tools: {rules: {t: {hook: "nowhere.module:fn"}}}}\n'
    )
    result = _gateway("check", "--config", str(config))
    assert result.returncode == 1
    assert "nowhere.module:fn" in result.stderr and "No module named" in result.stderr


def test_route_explains_a_decision(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "providers: {d: {type: demo}}\n"
        "models: [{name: small, provider: d}, {name: big, provider: d}]\n"
        "cache: {embedder: {type: hash}}\n"
        "routing: {aliases: {auto: {tiers: [{model: small, max_score: 0.5}, {model: big}]}}}\n"
    )
    result = _gateway("route", "hi there", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "score:" in result.stdout and "auto -> tier 0: small" in result.stdout
    unknown = _gateway("route", "hi", "--alias", "nope", "--config", str(config))
    assert unknown.returncode == 2 and "auto" in unknown.stderr
