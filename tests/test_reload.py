"""Live reload: edits are picked up, bad edits never replace the running config, and requests
in flight finish on the runtime they started with."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config import Settings, build_settings, load_settings, parse_config
from gateway.http.keys import RUNTIME_REF
from gateway.server.reload import _warn_about_restart_only_changes
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import dump_yaml
from gateway.testing.harness.inprocess import GatewayServer, ServerThread
from gateway.testing.harness.starters import start_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import poll_until, request

ADMIN = "reload-admin-key"


def config_text(fake_url: str, *extra_models: str, **sections: Any) -> str:
    """config.yaml with fake-model and `extra_models` on the fake; `sections` are added (or
    replace one), valid or not."""
    names = ["fake-model", *extra_models]
    config = {
        "server": {"access_log": False},
        "auth": {"admin_key_env": "RELOAD_TEST_ADMIN"},
        "providers": {"fake": {"type": "openai", "base_url": fake_url}},
        "models": [{"name": n, "provider": "fake", "upstream_model": f"up-{n}"} for n in names],
    }
    return dump_yaml({**config, **sections})


@pytest.fixture
def config_file(tmp_path: Path, fake: FakeUpstream) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(config_text(fake.url))
    return path


@pytest.fixture
def live(
    server_thread: ServerThread, config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GatewayServer]:
    monkeypatch.setenv("RELOAD_TEST_ADMIN", ADMIN)
    server = server_thread.call(GatewayServer(load_settings(config_file)).start())
    yield server
    server_thread.call(server.stop())


def models(gw: GatewayServer) -> set[str]:
    client = sdk_client(gw.url, "k")
    return {m.id for m in client.models.list()}


def metric(gw: GatewayServer, result: str) -> float:
    text = asyncio.run(request("GET", gw.url + "/metrics")).text
    found = re.search(rf'gateway_config_reloads_total{{result="{result}"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def write(path: Path, text: str) -> None:
    path.write_text(text)
    os.utime(path)


def test_an_edit_is_picked_up(live: GatewayServer, config_file: Path, fake: FakeUpstream) -> None:
    write(config_file, config_text(fake.url, "added"))
    assert poll_until(lambda: "added" in models(live), timeout=5)
    assert metric(live, "reloaded") == 1


def test_a_bad_edit_keeps_the_running_config(
    live: GatewayServer, config_file: Path, fake: FakeUpstream
) -> None:
    write(config_file, config_text(fake.url, not_a_section=1))
    assert poll_until(lambda: metric(live, "invalid") >= 1, timeout=5)
    assert models(live) == {"fake-model"}
    write(config_file, "providers: {fake: {type: openai, base_url: ")  # half-written
    time.sleep(1.5)
    assert models(live) == {"fake-model"}
    write(config_file, config_text(fake.url, "fixed"))
    assert poll_until(lambda: "fixed" in models(live), timeout=5)


def test_admin_reload_reports_problems(live: GatewayServer, config_file: Path, fake: Any) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    url = live.url + "/admin/reload"
    unchanged = asyncio.run(request("POST", url, headers=headers))
    assert unchanged.status == 200 and unchanged.json()["result"] == "unchanged"
    config_file.write_text(config_text(fake.url, resilience={"retry": {"attempts": 0}}))
    refused = asyncio.run(request("POST", url, headers=headers))
    assert refused.status == 422
    error = refused.json()["error"]
    assert error["code"] == "config_invalid" and "resilience.retry.attempts" in error["message"]
    assert models(live) == {"fake-model"}
    assert asyncio.run(request("POST", url)).status == 401


def test_requests_in_flight_finish_on_their_runtime(
    live: GatewayServer, config_file: Path, fake: FakeUpstream
) -> None:
    fake.per_model["up-fake-model"] = Knobs(latency_ms=800)
    old = live.app[RUNTIME_REF].current

    async def slow_request_during_reload() -> int:
        async with aiohttp.ClientSession() as session:
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]}
            pending = asyncio.ensure_future(
                session.post(live.url + "/v1/chat/completions", json=body)
            )
            await asyncio.sleep(0.2)
            write(config_file, config_text(fake.url, "other"))
            async with await pending as response:
                await response.read()
                return response.status

    try:
        assert asyncio.run(slow_request_during_reload()) == 200
    finally:
        fake.per_model.clear()
    assert poll_until(lambda: live.app[RUNTIME_REF].current is not old, timeout=5)
    assert poll_until(lambda: old.upstreams.closed, timeout=5), "the old pools are closed after"


def test_no_request_fails_while_the_config_is_rewritten(
    live: GatewayServer, config_file: Path, fake: FakeUpstream
) -> None:
    async def hammer() -> list[int]:
        statuses: list[int] = []
        stop = time.monotonic() + 6
        async with aiohttp.ClientSession() as session:

            async def client() -> None:
                body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]}
                while time.monotonic() < stop:
                    async with session.post(live.url + "/v1/chat/completions", json=body) as resp:
                        await resp.read()
                        statuses.append(resp.status)

            async def editor() -> None:
                variants = [
                    config_text(fake.url, "a"),
                    "models: [",  # half-written
                    config_text(fake.url, "b"),
                    config_text(fake.url, bogus=True),  # invalid
                    config_text(fake.url, "c"),
                ]
                for text in variants:
                    write(config_file, text)
                    await asyncio.sleep(1.1)

            await asyncio.gather(editor(), *(client() for _ in range(8)))
        return statuses

    statuses = asyncio.run(hammer())
    assert len(statuses) > 100 and set(statuses) == {200}, set(statuses)
    assert poll_until(lambda: "c" in models(live), timeout=5)


def test_sighup_reloads_a_running_gateway(tmp_path: Path, fake: FakeUpstream) -> None:
    path = tmp_path / "config.yaml"
    server = {"access_log": False, "watch_config": False, "port": 0}
    path.write_text(config_text(fake.url, server=server))
    with start_gateway(tmp_path, path) as gateway:
        path.write_text(config_text(fake.url, "hupped"))
        time.sleep(1.5)
        assert "hupped" not in _ids(gateway.url), "watching is off: only the signal reloads"
        gateway.proc.send_signal(signal.SIGHUP)
        assert poll_until(lambda: "hupped" in _ids(gateway.url), timeout=5)


def _ids(url: str) -> set[str]:
    client = sdk_client(url, "k")
    return {m.id for m in client.models.list()}


def test_a_responses_edit_says_it_takes_effect_at_the_next_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The response store belongs to the process: a reload keeps it, and says so."""

    def settings(responses: str) -> Settings:
        text = config_text("http://127.0.0.1:1/v1") + responses
        return build_settings(parse_config(text), "config.yaml", environ={})

    before = settings("")
    with caplog.at_level("WARNING", "gateway"):
        _warn_about_restart_only_changes(before, settings(""))
        assert not caplog.records
        _warn_about_restart_only_changes(before, settings("responses: {ttl_seconds: 3600}\n"))
        _warn_about_restart_only_changes(before, settings("responses: {store: {type: redis}}\n"))
    assert [r.getMessage() for r in caplog.records] == [
        "responses (its store, redis or ttl) changes take effect at the next restart"
    ] * 2


def test_an_edit_that_names_an_unset_tenant_key_says_so(
    live: GatewayServer, config_file: Path, fake: Any, caplog: pytest.LogCaptureFixture
) -> None:
    keys = {"keys": [{"env": "RELOAD_TEST_UNSET_KEY", "tenant": "late"}]}
    auth = {"admin_key_env": "RELOAD_TEST_ADMIN", **keys}
    config_file.write_text(config_text(fake.url, auth=auth))
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with caplog.at_level("INFO", "gateway"):
        reloaded = asyncio.run(request("POST", live.url + "/admin/reload", headers=headers))
    assert reloaded.json()["result"] == "reloaded"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        "  RELOAD_TEST_UNSET_KEY is not set (auth.keys[0].env): tenant 'late' has no key, so "
        "every request meant for it gets 401"
    ) in warnings
    assert not any("RELOAD_TEST_ADMIN" in r.getMessage() for r in caplog.records)  # was set


def test_the_reload_log_names_the_policy_files_that_changed(
    live: GatewayServer, config_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policies = config_file.parent / "policies"
    policies.mkdir()
    source = f"config reloaded from {config_file}"

    def logged(expected: str) -> bool:
        return any(r.getMessage() == expected for r in caplog.records)

    policy = {"match": {"models": ["fake-model"]}, "cache": {"enabled": True}}
    with caplog.at_level("WARNING", "gateway"):
        write(policies / "team.yaml", dump_yaml(policy))
        assert poll_until(lambda: logged(f"{source} (policies/team.yaml added)"), timeout=5)
        write(policies / "team.yaml", dump_yaml({**policy, "cache": {"enabled": False}}))
        assert poll_until(lambda: logged(f"{source} (policies/team.yaml edited)"), timeout=5)
        write(policies / "other.yaml", "match: {tenants: ['*']}\ncahce: {enabled: true}\n")
        refused = "config reload refused (policies/other.yaml added), still running"
        assert poll_until(
            lambda: any(r.getMessage().startswith(refused) for r in caplog.records), timeout=5
        )
        (policies / "other.yaml").unlink()
        (policies / "team.yaml").unlink()
        # other.yaml never ran: only team.yaml's leaving changes the running config
        assert poll_until(lambda: logged(f"{source} (policies/team.yaml removed)"), timeout=5)
