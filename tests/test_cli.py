"""The CLI as a user runs it: `python -m gateway check|serve` in a subprocess."""

import json
import os
import re
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

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
        assert poll_until(lambda: "routed aliases: demo-auto" in server.output(), timeout=5)
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


TENANTS = {
    **DEMO,
    "auth": {
        "keys": [
            {"env": "CLI_TEST_KEY_A", "tenant": "team-a"},
            {"env": "CLI_TEST_KEY_B", "tenant": "team-b"},
        ],
        "admin_key_env": "CLI_TEST_ADMIN_KEY",
    },
}
ALL_SET = {"CLI_TEST_KEY_A": "key-a", "CLI_TEST_KEY_B": "key-b", "CLI_TEST_ADMIN_KEY": "admin"}


def test_check_warns_of_an_unset_tenant_key_and_require_env_fails_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = str(write_config(tmp_path, TENANTS))
    for name, value in ALL_SET.items():
        monkeypatch.setenv(name, value)
    quiet = _gateway("check", "--config", config, "--require-env")
    assert quiet.returncode == 0, quiet.stderr
    assert "not set" not in quiet.stdout + quiet.stderr
    monkeypatch.delenv("CLI_TEST_KEY_B")
    monkeypatch.delenv("CLI_TEST_ADMIN_KEY")
    warned = _gateway("check", "--config", config)
    assert warned.returncode == 0  # may be set only where the gateway runs
    assert (
        "  warning: CLI_TEST_KEY_B is not set (auth.keys[1].env): tenant 'team-b' has no key, "
        "so every request meant for it gets 401"
    ) in warned.stderr.splitlines()
    assert "CLI_TEST_ADMIN_KEY is not set (auth.admin_key_env): the admin API" in warned.stdout
    assert "CLI_TEST_KEY_A" not in warned.stdout + warned.stderr
    strict = _gateway("check", "--config", config, "--require-env")
    assert strict.returncode == 1
    assert "error: CLI_TEST_KEY_B is not set" in strict.stderr
    assert "error: CLI_TEST_ADMIN_KEY is not set" in strict.stderr


def test_check_says_when_no_listed_key_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ALL_SET:
        monkeypatch.delenv(name, raising=False)
    result = _gateway("check", "--config", str(write_config(tmp_path, TENANTS)))
    assert result.returncode == 0
    assert "no key of auth.keys is set, so every request gets 401" in result.stderr


def test_serve_names_unset_variables_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLI_TEST_KEY_A", "key-a")
    monkeypatch.delenv("CLI_TEST_KEY_B", raising=False)
    monkeypatch.delenv("CLI_TEST_ADMIN_KEY", raising=False)
    with start_gateway(tmp_path, write_config(tmp_path, TENANTS)) as server:
        assert poll_until(lambda: "serving models: m" in server.output(), timeout=5)
        output = server.output()
        assert "warning: CLI_TEST_KEY_B is not set (auth.keys[1].env)" in output
        assert "note: CLI_TEST_ADMIN_KEY is not set" in output
        assert "CLI_TEST_KEY_A" not in output


def _serve_fails(tmp_path: Path, *args: str, wrapper: tuple[str, ...] = ()) -> str:
    """`gateway serve ARGS` that cannot listen: its one line on stderr (and nothing else).
    Anonymous callers allowed, so that an address of another machine gets as far as listening."""
    config = str(write_config(tmp_path, {**DEMO, "auth": {"anonymous": True}}))
    result = run_gateway_cli("serve", "--config", config, *args, wrapper=wrapper)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gateway: cannot listen on "), result.stderr
    return lines[0]


def test_serve_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = _serve_fails(tmp_path, "--host", "127.0.0.1", "--port", str(port))
    assert f"127.0.0.1:{port}" in line and "already in use" in line and "--port" in line


def test_serve_on_a_host_that_is_not_here_says_so_in_one_line(tmp_path: Path) -> None:
    unresolvable = _serve_fails(tmp_path, "--host", "no-such-host.invalid", "--port", "0")
    assert "'no-such-host.invalid' does not resolve" in unresolvable and "--host" in unresolvable
    foreign = _serve_fails(tmp_path, "--host", "192.0.2.1", "--port", "0")  # TEST-NET-1
    assert "'192.0.2.1' is not an address of this machine" in foreign


def test_serve_on_a_privileged_port_says_so_in_one_line(tmp_path: Path) -> None:
    # Root may listen on any port, but not as root of a user namespace of its own: it keeps
    # root's files and has no capability in the machine's network namespace.
    wrapper = ("unshare", "--user", "--map-root-user") if os.geteuid() == 0 else ()
    line = _serve_fails(tmp_path, "--host", "127.0.0.1", "--port", "1", wrapper=wrapper)
    assert "permission denied" in line and "--port" in line


def test_serve_with_a_store_it_cannot_open_says_which_in_one_line(tmp_path: Path) -> None:
    # e.g. a data directory that is read-only, or (here, and for root too) a file in its place
    (tmp_path / "data").write_text("not a directory")
    cached = {**DEMO, "models": [{"name": "m", "provider": "d", "cache": {"enabled": True}}]}
    cached["cache"] = {"store": {"path": str(tmp_path / "data" / "cache.sqlite3")}}
    result = _gateway("serve", "--config", str(write_config(tmp_path, cached)), "--port", "0")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gateway: cannot open the store {tmp_path / 'data'}")
    assert "cache.store.path" in lines[0]


def test_serve_refuses_a_port_out_of_range_without_a_traceback(tmp_path: Path) -> None:
    result = _gateway("serve", "--config", str(write_config(tmp_path, DEMO)), "--port", "70000")
    assert result.returncode == 2
    assert "70000 is not a port (0 to 65535)" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_notes_a_routing_alias_with_no_tier_it_can_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLI_TEST_UPSTREAM_KEY", raising=False)
    upstream = {"type": "openai", "base_url": "http://127.0.0.1:1/v1"}
    config = {
        "providers": {
            "d": {"type": "demo"},
            "up": {**upstream, "api_key_env": "CLI_TEST_UPSTREAM_KEY"},
        },
        "models": [{"name": "m", "provider": "d"}, {"name": "big", "provider": "up"}],
        "cache": {"embedder": {"type": "hash"}},
        "routing": {
            "aliases": {"smart": {"tiers": [{"model": "big"}]}, "ok": {"tiers": [{"model": "m"}]}}
        },
    }
    result = _gateway("check", "--config", str(write_config(tmp_path, config)))
    assert result.returncode == 0, result.stderr
    assert "routing alias 'smart' has no tier it can serve (big: " in result.stdout
    assert "alias 'ok'" not in result.stdout


def test_cache_explain_shows_each_step_of_the_hit_decision() -> None:
    result = _gateway(
        "cache",
        "explain",
        "How do I convert Celsius to Fahrenheit?",
        "How do I convert Fahrenheit to Celsius?",
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert set(lines) >= {"cosine", "vetoes", "word", "judge", "verdict"}
    assert "(threshold 0.9400; the judge from 0.8500)" in lines["cosine"]
    assert lines["vetoes"].split()[1] == "unit"  # the same units, in the other direction
    assert lines["verdict"] == "verdict        miss: unit"


def test_cache_explain_takes_two_texts() -> None:
    result = _gateway("cache", "explain", "only one")
    assert result.returncode == 2
    assert "two texts" in result.stderr


def test_cache_stats_url_says_which_admin_key_it_needs_and_how_to_pass_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = {
        **DEMO,
        "auth": {"admin_key_env": "CLI_TEST_ADMIN"},
        "cache": {
            "store": {"type": "memory"},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": True},
        },
    }
    config = str(write_config(tmp_path, served))
    with start_gateway(tmp_path, Path(config), env={"CLI_TEST_ADMIN": "sk-admin-right"}) as gw:
        ask = ("cache", "stats", "--config", config, "--url", gw.url)
        monkeypatch.delenv("CLI_TEST_ADMIN", raising=False)
        missing = run_gateway_cli(*ask)
        assert missing.returncode == 1
        assert "/admin/cache/stats needs the admin key: set CLI_TEST_ADMIN to that gateway's " in (
            missing.stderr
        )
        assert "--admin-key-env NAME" in missing.stderr
        monkeypatch.setenv("CLI_TEST_ADMIN", "sk-admin-wrong")
        wrong = run_gateway_cli(*ask)
        assert wrong.returncode == 1
        assert "answered 401: the key in CLI_TEST_ADMIN is not that gateway's admin key" in (
            wrong.stderr
        )
        monkeypatch.setenv("CLI_TEST_OTHER", "sk-admin-right")
        right = run_gateway_cli(*ask, "--admin-key-env", "CLI_TEST_OTHER")
        assert right.returncode == 0, right.stderr
        assert json.loads(right.stdout.split("\nverification", 1)[0])["entries"] == 0
    help_text = " ".join(run_gateway_cli("cache", "--help").stdout.split())
    assert "which needs that gateway's admin key" in help_text and "--admin-key-env" in help_text
    # A gateway whose own admin key variable is unset has the admin API off: said so.
    with start_gateway(tmp_path, Path(config), name="no-admin", env={"CLI_TEST_ADMIN": ""}) as gw:
        off = run_gateway_cli("cache", "stats", "--config", config, "--url", gw.url)
    assert off.returncode == 1 and "that gateway's admin API is off" in off.stderr


def test_check_warns_of_a_base_url_without_a_version_and_passes(tmp_path: Path) -> None:
    providers = {
        "local": {"type": "openai", "base_url": "http://127.0.0.1:8000"},
        "ok": {"type": "openai", "base_url": "http://127.0.0.1:8001/v1"},
    }
    models = [{"name": "a", "provider": "local"}, {"name": "b", "provider": "ok"}]
    config = write_config(tmp_path, {"providers": providers, "models": models})
    result = _gateway("check", "--config", str(config))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "base_url" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        "  warning: providers.local: base_url http://127.0.0.1:8000 has no version segment"
    )
    assert "use http://127.0.0.1:8000/v1" in warnings[0]


def test_check_warns_of_a_public_host_without_keys_and_passes(tmp_path: Path) -> None:
    """`serve` refuses 0.0.0.0 without keys (gateway/server/exposure.py); `check` says so
    ahead, as a warning: `serve --host 127.0.0.1` may still run the same file."""
    demo = {"providers": {"demo": {"type": "demo"}}, "models": [{"name": "d", "provider": "demo"}]}
    public = write_config(tmp_path, {**demo, "server": {"host": "0.0.0.0"}}, name="public.yaml")
    result = _gateway("check", "--config", str(public))
    assert result.returncode == 0, result.stderr
    assert "warning: server.host: serve would be refusing to serve 0.0.0.0" in result.stderr
    opted = {**demo, "server": {"host": "0.0.0.0"}, "auth": {"anonymous": True}}
    quiet = _gateway("check", "--config", str(write_config(tmp_path, opted, name="opted.yaml")))
    assert quiet.returncode == 0 and "server.host" not in quiet.stderr, quiet.stderr
