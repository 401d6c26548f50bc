"""The CLI as a user runs it: `python -m gateway check|serve` in a subprocess."""

import json
import re
import subprocess
import urllib.request
from pathlib import Path

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import run_gateway_cli, start_gateway
from tests.e2e.helpers import poll_until

ROOT = Path(__file__).resolve().parents[1]


DEMO = {"providers": {"d": {"type": "demo"}}, "models": [{"name": "m", "provider": "d"}]}


def _gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return run_gateway_cli(*args)


def _check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return _gateway("check", "--config", str(path))


def test_check_accepts_the_shipped_config() -> None:
    result = _gateway("check")
    assert result.returncode == 0, result.stderr
    assert "config.yaml: OK" in result.stdout


def test_check_names_each_bad_field_and_fails(tmp_path: Path) -> None:
    text = "server: {port: -1}\nproviders: {d: {type: demo}}\nmodels: [{name: x, provider: d}]\n"
    result = _check(tmp_path, text + "extra: 1\n")  # YAML as written: its lines are named
    assert result.returncode == 1
    assert "server.port (line 1): Input should be greater than or equal to 0" in result.stderr
    assert "extra (line 4): Extra inputs are not permitted" in result.stderr


def test_serve_prints_where_it_listens_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    shipped = (ROOT / "config.yaml").read_text()
    config.write_text(shipped.replace("data/cache.sqlite3", str(tmp_path / "cache.sqlite3")))
    with start_gateway(tmp_path, config, cwd=ROOT) as server:
        # The URL comes from its "listening on http://..." line.
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.url), server.output()
        assert poll_until(lambda: "serving models: demo" in server.output(), timeout=5)
        with urllib.request.urlopen(server.url + "/readyz", timeout=10) as response:
            assert json.load(response)["status"] == "ready"
        assert server.stop(timeout=15) == 0  # SIGTERM: a clean exit


def test_check_imports_tool_rule_hooks(tmp_path: Path) -> None:
    hook = {"hook": "nowhere.module:fn"}
    config = {**DEMO, "guard": {"tools": {"rules": {"t": hook}}}}
    result = _gateway("check", "--config", str(write_config(tmp_path, config)))
    assert result.returncode == 1
    assert "nowhere.module:fn" in result.stderr and "No module named" in result.stderr


def test_route_explains_a_decision(tmp_path: Path) -> None:
    tiers = [{"model": "small", "max_score": 0.5}, {"model": "big"}]
    config = write_config(
        tmp_path,
        {
            "providers": {"d": {"type": "demo"}},
            "models": [{"name": "small", "provider": "d"}, {"name": "big", "provider": "d"}],
            "cache": {"embedder": {"type": "hash"}},
            "routing": {"aliases": {"auto": {"tiers": tiers}}},
        },
    )
    result = _gateway("route", "hi there", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "score:" in result.stdout and "auto -> tier 0: small" in result.stdout
    unknown = _gateway("route", "hi", "--alias", "nope", "--config", str(config))
    assert unknown.returncode == 2 and "auto" in unknown.stderr
