"""Issue 34, item 1: a misconfigured provider is an error, an outage degrades. Through the real
OpenAI SDK (its default retries on), against a fake upstream that behaves as a real provider
does: it rejects keys it does not know (401) and models it does not serve (404). The gateway
runs with level-4 answers on (the shipped default), so an error here is a decision, not the
test settings' `mode: error`."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.fake_settings import (
    FAKE_PROVIDER_KEY,
    FAKE_PROVIDER_KEY_ENV,
    fake_config,
    settings_for,
)
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.process import free_port
from tests.e2e.helpers import poll_until

Json = dict[str, Any]

# The shipped defaults where they matter: retries, a breaker that opens after 5 failures, and
# level-4 answers instead of errors.
DEFAULTS: Json = {
    "resilience": {
        "retry": {"attempts": 3, "initial_backoff_ms": 1, "max_backoff_ms": 2},
        "breaker": {"failures": 5, "reset_seconds": 30},
        "probe_seconds": 0.2,
    },
    "degradation": {"unavailable": {"mode": "answer"}},
}


SERVED = ["fake-model", "upstream-name", "fake-embedding"]


@pytest.fixture
def upstream(server_thread: ServerThread) -> Iterator[FakeUpstream]:
    """A fake provider of this test's own, which knows only the gateway's key and one model."""
    fake = server_thread.call(FakeUpstream(keys=[FAKE_PROVIDER_KEY], served_models=SERVED).start())
    yield fake
    server_thread.call(fake.stop())


def _gateway(
    server_thread: ServerThread, url: str, environ: dict[str, str] | None = None, **extra: Any
) -> Any:
    return running_gateway(server_thread, settings_for(url, {**DEFAULTS, **extra}, environ))


def _client(gw: GatewayServer) -> openai.OpenAI:
    """The SDK as apps use it: its default two retries on."""
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key="client-key", timeout=10)


def _chat(client: openai.OpenAI, model: str = "fake-model", stream: bool = False) -> Any:
    messages: Any = [{"role": "user", "content": "hello"}]
    if stream:
        return list(client.chat.completions.create(model=model, messages=messages, stream=True))
    return client.chat.completions.create(model=model, messages=messages)


def _fault(call: Any) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    err = info.value
    assert err.status_code == 502, (err.status_code, err.body)
    assert err.response.headers["x-should-retry"] == "false"
    return err


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_rejected_provider_key_is_an_error_naming_the_variable_not_a_level_4_answer(
    server_thread: ServerThread, upstream: FakeUpstream, stream: bool
) -> None:
    with (
        _gateway(server_thread, upstream.url, {FAKE_PROVIDER_KEY_ENV: "sk-revoked-key-000"}) as gw,
        _client(gw) as client,
    ):
        err = _fault(lambda: _chat(client, stream=stream))
        assert isinstance(err.body, dict) and err.body["code"] == "upstream_auth_failed"
        assert "provider 'fake' rejected the gateway's key" in err.message
        assert FAKE_PROVIDER_KEY_ENV in err.message
        assert "sk-revoked" not in err.response.text
        # One call: no retry by the gateway, and none by the SDK (x-should-retry: false).
        assert upstream.stats["requests"] == 1


def test_a_model_the_provider_does_not_know_is_an_error_naming_it(
    server_thread: ServerThread, upstream: FakeUpstream
) -> None:
    models = [{"name": "typo", "provider": "fake", "upstream_model": "gpt-4o-mimi"}]
    with _gateway(server_thread, upstream.url, models=models) as gw, _client(gw) as client:
        err = _fault(lambda: _chat(client, model="typo"))
        assert isinstance(err.body, dict) and err.body["code"] == "upstream_model_unknown"
        assert "does not know the model 'gpt-4o-mimi'" in err.message


def test_a_base_url_without_its_api_path_is_an_error_naming_base_url(
    server_thread: ServerThread, upstream: FakeUpstream
) -> None:
    with _gateway(server_thread, upstream.url.removesuffix("/v1")) as gw, _client(gw) as client:
        err = _fault(lambda: _chat(client))
        assert isinstance(err.body, dict) and err.body["code"] == "upstream_not_found"
        assert "providers.fake.base_url" in err.message


def test_a_provider_that_never_answered_is_an_error_naming_its_address(
    server_thread: ServerThread,
) -> None:
    port = free_port()
    with _gateway(server_thread, f"http://127.0.0.1:{port}/v1") as gw, _client(gw) as client:
        err = _fault(lambda: _chat(client))
        assert isinstance(err.body, dict) and err.body["code"] == "upstream_unreachable"
        assert f"127.0.0.1:{port}" in err.message and "has not answered" in err.message
        assert "connection refused" in err.message
        assert _chat(client, model="demo").choices[0].message.content, "others still work"


def test_faults_open_no_breaker_so_the_fix_works_at_once(
    server_thread: ServerThread, upstream: FakeUpstream
) -> None:
    upstream.keys = ["sk-the-right-key"]
    with _gateway(server_thread, upstream.url) as gw, _client(gw) as client:
        for _ in range(8):  # more than the breaker's 5 failures
            _fault(lambda: _chat(client))
        upstream.keys = [FAKE_PROVIDER_KEY]  # the operator fixes the provider's side
        answer = _chat(client)
        assert answer.choices[0].message.content == "Echo: hello"


def test_a_misconfigured_deployment_is_moved_on_from(
    server_thread: ServerThread, upstream: FakeUpstream
) -> None:
    models = [
        {"name": "twice", "provider": "fake", "upstream_model": "no-such-model"},
        {"name": "backup", "provider": "fake", "upstream_model": "upstream-name"},
    ]
    models[0]["fallbacks"] = ["backup"]  # type: ignore[assignment]
    with _gateway(server_thread, upstream.url, models=models) as gw, _client(gw) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="twice", messages=[{"role": "user", "content": "hello"}]
        )
        assert raw.headers["x-gateway-fallback"] == "backup"
        assert raw.parse().choices[0].message.content == "Echo: hello"


def test_an_outage_still_degrades_to_level_4_and_says_why(
    server_thread: ServerThread, upstream: FakeUpstream
) -> None:
    with _gateway(server_thread, upstream.url) as gw, _client(gw) as client:
        assert _chat(client).choices[0].message.content == "Echo: hello"
        upstream.defaults = upstream.defaults.model_copy(update={"status": 500})
        raw = client.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "hello"}]
        )
        assert raw.headers["x-gateway-level"] == "4"
        assert raw.headers["x-gateway-unavailable-cause"] == "upstream_error"
        assert raw.parse().choices[0].message.content


def test_a_provider_that_answered_and_went_away_is_an_outage(server_thread: ServerThread) -> None:
    gone = server_thread.call(FakeUpstream().start())
    with _gateway(server_thread, gone.url) as gw, _client(gw) as client:
        assert _chat(client).choices[0].message.content == "Echo: hello"
        server_thread.call(gone.stop())
        raw = client.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "hello"}]
        )
        assert raw.headers["x-gateway-level"] == "4"
        assert raw.headers["x-gateway-unavailable-cause"] == "upstream_unreachable"


def test_a_fault_is_logged_once_per_cause(
    server_thread: ServerThread, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.keys = ["sk-the-right-key"]
    with (
        caplog.at_level(logging.ERROR),
        _gateway(server_thread, upstream.url) as gw,
        _client(gw) as client,
    ):
        for _ in range(4):
            _fault(lambda: _chat(client))
    errors = [r for r in caplog.records if "rejected the gateway's key" in r.getMessage()]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].levelno == logging.ERROR


def test_readyz_shows_each_providers_health(
    server_thread: ServerThread, upstream: FakeUpstream
) -> None:
    upstream.keys = ["sk-the-right-key"]
    with _gateway(server_thread, upstream.url) as gw:

        def providers() -> Json:
            found: Json = httpx.get(f"{gw.url}/readyz", timeout=5).json()["providers"]
            return found

        assert poll_until(lambda: providers()["fake"]["status"] == "auth_failed", timeout=5)
        assert providers()["demo"]["status"] == "ok"
        upstream.keys = [FAKE_PROVIDER_KEY]
        assert poll_until(lambda: providers()["fake"]["status"] == "ok", timeout=5)


def _check_probe(
    tmp_path: Path, url: str, key: str, **changes: Any
) -> subprocess.CompletedProcess[str]:
    config = {**fake_config(url), **changes}
    path = write_config(tmp_path, config)
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--probe", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", FAKE_PROVIDER_KEY_ENV: key},
        check=False,
    )


def test_check_probe_fails_with_the_fix(tmp_path: Path, upstream: FakeUpstream) -> None:
    good = _check_probe(tmp_path, upstream.url, FAKE_PROVIDER_KEY)
    assert good.returncode == 0, good.stderr
    assert "provider fake: ok" in good.stdout and "provider demo: ok" in good.stdout

    rejected = _check_probe(tmp_path, upstream.url, "sk-revoked-key-000")
    assert rejected.returncode == 1
    assert "provider fake: auth_failed" in rejected.stderr
    assert FAKE_PROVIDER_KEY_ENV in rejected.stderr and "sk-revoked" not in rejected.stderr

    typo = [{"name": "typo", "provider": "fake", "upstream_model": "gpt-4o-mimi"}]
    unknown = _check_probe(tmp_path, upstream.url, FAKE_PROVIDER_KEY, models=typo)
    assert unknown.returncode == 1
    assert "model_unknown" in unknown.stderr and "gpt-4o-mimi" in unknown.stderr

    nowhere = _check_probe(tmp_path, f"http://127.0.0.1:{free_port()}/v1", FAKE_PROVIDER_KEY)
    assert nowhere.returncode == 1 and "unreachable" in nowhere.stderr
