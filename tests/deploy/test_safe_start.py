"""Safe to deploy: `gateway serve` as an operator runs it refuses a secret that holds a
placeholder (the shipped Kubernetes Secret's `replace-me`) and refuses to serve callers without
a key on an address other machines reach, unless the config says `auth.anonymous: true`; a live
reload that would do either is refused and the running config stays. Loopback without keys
(the quickstart) keeps working. Each message names the variable or setting and the fix, never
a secret's value. (The rules: tests/config/test_placeholders.py, tests/server/test_exposure.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.process import Server
from gateway.testing.harness.starters import run_gateway_cli, start_gateway
from gateway.testing.harness.sync_http import Reply, http
from tests.clients import sdk_client

ADMIN = "9d8c7b6a5f4e3d2c1b0a-safe-start"
TEAM = "a3f1c9e27b5d4086-safe-start"
DEMO: dict[str, Any] = {
    "server": {"access_log": False, "watch_config": False},  # reloads by POST only
    "providers": {"d": {"type": "demo"}},
    "models": [{"name": "m", "provider": "d"}],
}
KEYED: dict[str, Any] = {
    **DEMO,
    "auth": {"keys": [{"env": "SAFE_TEAM_KEY", "tenant": "team"}], "admin_key_env": "SAFE_ADMIN"},
}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real-looking keys in this process's environment, which the gateway processes inherit."""
    monkeypatch.setenv("SAFE_TEAM_KEY", TEAM)
    monkeypatch.setenv("SAFE_ADMIN", ADMIN)
    monkeypatch.delenv("SAFE_OPENAI_KEY", raising=False)


def _refused(result: subprocess.CompletedProcess[str], *values: str) -> list[str]:
    """The lines of a refusal: exit 1, nothing on stdout, no traceback, no secret value."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    for value in values:
        assert value not in result.stderr
    return result.stderr.splitlines()


def _ask(server: Server, key: str = "no-key") -> str:
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    reply = sdk_client(url, key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]
    )
    return reply.choices[0].message.content or ""


def _reload(server: Server) -> Reply:
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    return http("POST", url + "/admin/reload", headers={"Authorization": f"Bearer {ADMIN}"})


@pytest.mark.parametrize(
    ("variable", "value", "where"),
    [
        ("SAFE_TEAM_KEY", "replace-me", "auth.keys[0].env"),
        ("SAFE_ADMIN", "<admin key>", "auth.admin_key_env"),
        ("SAFE_OPENAI_KEY", "sk-xxxxxxxxxxxxxxxxxxxx", "providers.openai.api_key_env"),
    ],
)
def test_a_placeholder_secret_stops_serve_and_fails_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, where: str
) -> None:
    monkeypatch.setenv(variable, value)
    provider = {
        "type": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "SAFE_OPENAI_KEY",
    }
    config = write_config(
        tmp_path, {**KEYED, "providers": {**DEMO["providers"], "openai": provider}}
    )
    for command, *more in (("serve", "--port", "0"), ("check",)):
        lines = _refused(run_gateway_cli(command, "--config", str(config), *more), value)
        assert lines[0] == f"{config}: invalid configuration"
        assert len(lines) == 2, lines  # the problem in one line
        assert lines[1].startswith(f"  - {variable} ({where}) holds a placeholder ("), lines
        assert "not a secret: put " in lines[1]


def test_a_reload_that_names_a_placeholder_is_refused_and_the_running_config_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAFE_NEW_KEY", "changeme")  # named by no config yet
    config = write_config(tmp_path, KEYED)
    with start_gateway(tmp_path, config) as server:
        assert _ask(server, TEAM)
        keys = [*KEYED["auth"]["keys"], {"env": "SAFE_NEW_KEY", "tenant": "newcomer"}]
        write_config(tmp_path, {**KEYED, "auth": {**KEYED["auth"], "keys": keys}})
        refused = _reload(server)
        assert refused.status == 422
        message = refused.json()["error"]["message"]
        assert "SAFE_NEW_KEY (auth.keys[1].env) holds a placeholder" in message
        assert "changeme" not in message
        assert _ask(server, TEAM)  # the running config, keys and all
        with pytest.raises(openai.AuthenticationError):
            _ask(server, "changeme")
        log = server.output()
    assert "config reload refused" in log and "SAFE_NEW_KEY" in log and "changeme" not in log


@pytest.mark.parametrize(
    ("args", "server_host", "shown"),
    [
        (("--host", "0.0.0.0"), None, "0.0.0.0"),
        ((), "0.0.0.0", "0.0.0.0"),  # server.host in the config, as the scale-out config has it
        (("--host", "::"), None, "::"),
    ],
)
def test_no_keys_on_an_address_other_machines_reach_is_refused_in_one_line(
    tmp_path: Path, args: tuple[str, ...], server_host: str | None, shown: str
) -> None:
    config = dict(DEMO)
    if server_host:
        config["server"] = {**DEMO["server"], "host": server_host}
    path = write_config(tmp_path, config)
    lines = _refused(run_gateway_cli("serve", "--config", str(path), "--port", "0", *args))
    assert lines == [
        f"gateway: refusing to serve {shown} without keys: anyone who reaches it would be "
        "tenant 'local'; list keys in auth.keys, set auth.anonymous: true to allow it, or "
        "listen on 127.0.0.1 (--host or server.host)"
    ]


def test_anonymous_true_serves_callers_without_a_key_on_every_address(tmp_path: Path) -> None:
    public = {**DEMO["server"], "host": "0.0.0.0"}
    config = write_config(tmp_path, {**DEMO, "server": public, "auth": {"anonymous": True}})
    with start_gateway(tmp_path, config) as server:
        assert re.fullmatch(r"http://0\.0\.0\.0:\d+", server.url), server.output()
        assert _ask(server)


def test_loopback_without_keys_needs_no_opt_in(tmp_path: Path) -> None:
    with start_gateway(tmp_path, write_config(tmp_path, DEMO)) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert _ask(server)


def test_a_reload_that_drops_the_last_key_on_a_public_address_is_refused(tmp_path: Path) -> None:
    public = {**KEYED, "server": {**DEMO["server"], "host": "0.0.0.0"}}
    with start_gateway(tmp_path, write_config(tmp_path, public)) as server:
        assert server.url.startswith("http://0.0.0.0:"), server.output()
        with pytest.raises(openai.AuthenticationError):
            _ask(server)
        open_door = {**KEYED["auth"], "keys": []}
        write_config(tmp_path, {**public, "auth": open_door})
        refused = _reload(server)
        assert refused.status == 422
        assert "set auth.anonymous: true to allow it" in refused.json()["error"]["message"]
        with pytest.raises(openai.AuthenticationError):  # still keyed
            _ask(server)
        write_config(tmp_path, {**public, "auth": {**open_door, "anonymous": True}})
        assert _reload(server).json()["result"] == "reloaded"
        assert _ask(server)
