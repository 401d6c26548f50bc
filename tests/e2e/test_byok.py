"""Bring your own key end to end: callers of a tenant whose policy enables it send their own
provider key in `x-gateway-provider-key`; it goes to the provider for that request only, and
nothing that outlasts the request (cache, rate limits, cost, logs, metrics) holds it, only a
one-way hash of it.

The gateway is loaded from config.yaml and policies/*.yaml on disk, the client is the real
OpenAI SDK (raw aiohttp where the test reads the SSE bytes), the fake upstream records the
Authorization header of every call.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.accesslog import AccessLog
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.inprocess import GatewayServer, ServerThread
from gateway.testing.harness.metrics import metric_value
from tests.clients import sdk_client
from tests.e2e.helpers import (
    assert_openai_error,
    assert_raw_error,
    request,
    settings_from_files,
    sse_json,
    upstream_requests,
)

Json = dict[str, Any]
HEADER = "x-gateway-provider-key"
CONFIGURED_KEY = "sk-configured-provider-key-0001"
OTHER_PROVIDER_KEY = "sk-other-provider-key-0002"
CALLER_KEY = "sk-callers-own-key-AAAA1111"
CALLER_KEY_2 = "sk-callers-own-key-BBBB2222"
ADMIN_KEY = "byok-admin-key"
TENANT_KEYS = {
    "partner": "sk-gw-partner",
    "closed": "sk-gw-closed",
    "metered": "sk-gw-metered",
}
CLIENT_LOGGERS = ("openai", "httpx", "httpcore")
ENVIRON = {
    "BYOK_FAKE_KEY": CONFIGURED_KEY,
    "BYOK_OTHER_KEY": OTHER_PROVIDER_KEY,
    "BYOK_ADMIN": ADMIN_KEY,
    **{f"BYOK_TENANT_{t.upper()}": key for t, key in TENANT_KEYS.items()},
}


def hash16(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def config(fake_url: str, cache_path: Path) -> Json:
    return {
        "server": {"watch_config": False},
        "auth": {
            "admin_key_env": "BYOK_ADMIN",
            "keys": [{"env": f"BYOK_TENANT_{t.upper()}", "tenant": t} for t in TENANT_KEYS],
        },
        "providers": {
            "fake": {"type": "openai", "base_url": fake_url, "api_key_env": "BYOK_FAKE_KEY"},
            "other": {"type": "openai", "base_url": fake_url, "api_key_env": "BYOK_OTHER_KEY"},
        },
        "models": [
            {
                "name": "chat",
                "provider": "fake",
                "upstream_model": "chat-up",
                "fallbacks": ["backup"],
                "pricing": {"input_per_million": 1000, "output_per_million": 2000},
                "cache": {"enabled": True, "semantic": False},
            },
            {"name": "backup", "provider": "fake", "upstream_model": "backup-up"},
            {"name": "elsewhere", "provider": "other", "upstream_model": "elsewhere-up"},
        ],
        "cache": {"store": {"type": "sqlite", "path": str(cache_path)}},
        "resilience": {
            "retry": {"attempts": 3, "initial_backoff_ms": 1, "max_backoff_ms": 2},
            "breaker": {"failures": 1, "reset_seconds": 600},
        },
        "degradation": {"unavailable": {"mode": "error"}},
    }


POLICIES: dict[str, Json] = {
    "partners-byok": {
        "description": "Partners bring their own key for the fake provider.",
        "match": {"tenants": ["partner", "metered"]},
        "byok": {"enabled": True, "providers": ["fake"]},
    },
    "metered": {
        "match": {"tenants": ["metered"]},
        "rate_limits": {"requests_per_second": 0.01, "burst": 1},
    },
}


class Logged:
    """The gateway with its access log written to a buffer."""

    def __init__(self, server: GatewayServer, sink: io.BytesIO, log: AccessLog, cache: Path):
        self.server, self.sink, self.log, self.cache_path = server, sink, log, cache

    @property
    def url(self) -> str:
        return self.server.url

    def lines(self, server_thread: ServerThread) -> list[Json]:
        async def flush() -> None:
            self.log.flush()

        server_thread.call(flush())
        return [json.loads(line) for line in self.sink.getvalue().splitlines()]


@pytest.fixture(scope="module")
def byok_gateway(
    server_thread: ServerThread, fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Logged]:
    root = tmp_path_factory.mktemp("byok")
    cache_path = root / "cache" / "cache.sqlite3"
    settings = settings_from_files(root / "conf", config(fake.url, cache_path), POLICIES, ENVIRON)
    sink = io.BytesIO()
    log = AccessLog(sink)
    server = server_thread.call(GatewayServer(settings, log).start())
    try:
        yield Logged(server, sink, log, cache_path)
    finally:
        server_thread.call(server.stop())


@pytest.fixture
def gw(byok_gateway: Logged, fake_upstream: FakeUpstream, server_thread: ServerThread) -> Logged:
    """The BYOK gateway with a fresh fake upstream, closed breakers and an empty cache."""
    server_thread.call(byok_gateway.server.fresh_state())
    return byok_gateway


def client(gw: Logged, tenant: str) -> openai.OpenAI:
    return sdk_client(gw.url, TENANT_KEYS[tenant])


def ask(
    gw: Logged, tenant: str, text: str, key: str | None = None, model: str = "chat", **kw: Any
) -> Any:
    headers = {**kw.pop("extra_headers", {}), **({HEADER: key} if key is not None else {})}
    return client(gw, tenant).chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        extra_headers=headers,
        **kw,
    )


def authorizations(fake: FakeUpstream) -> list[str | None]:
    return [r["headers"].get("Authorization") for r in upstream_requests(fake)]


def settle(gw: Logged, server_thread: ServerThread) -> None:
    server_thread.call(gw.server.settle_cache())


def get(gw: Logged, path: str, admin: bool = False) -> Any:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"} if admin else {}
    return asyncio.run(request("GET", gw.url + path, headers=headers))


def breaker(gw: Logged, name: str) -> Json:
    states = get(gw, "/admin/breakers", admin=True).json()["breakers"]
    return next(b for b in states if b["name"] == name)


# --- whose key goes upstream -------------------------------------------------------------------


def test_the_callers_key_goes_upstream_for_that_request_only(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    own = ask(gw, "partner", "with my key", CALLER_KEY)
    assert own.parse().choices[0].message.content == "Echo: with my key"
    ask(gw, "partner", "with the gateway's key")
    ask(gw, "closed", "another tenant")
    assert authorizations(fake_upstream) == [
        f"Bearer {CALLER_KEY}",
        f"Bearer {CONFIGURED_KEY}",
        f"Bearer {CONFIGURED_KEY}",
    ]
    first = upstream_requests(fake_upstream)[0]
    assert first["body"]["model"] == "chat-up"
    others = {k: v for k, v in first["headers"].items() if k.lower() != "authorization"}
    assert CALLER_KEY not in json.dumps(others), "the key travels in Authorization only"
    assert HEADER not in {k.lower() for k in first["headers"]}


def test_streams_use_the_callers_key(gw: Logged, fake_upstream: FakeUpstream) -> None:
    stream = client(gw, "partner").chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "stream it with my key"}],
        stream=True,
        extra_headers={HEADER: CALLER_KEY},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Echo: stream it with my key"
    assert authorizations(fake_upstream) == [f"Bearer {CALLER_KEY}"]
    assert upstream_requests(fake_upstream)[0]["body"]["stream"] is True


def test_a_tenant_without_byok_gets_403(gw: Logged, fake_upstream: FakeUpstream) -> None:
    with pytest.raises(openai.PermissionDeniedError) as info:
        ask(gw, "closed", "may I?", CALLER_KEY)
    assert info.value.status_code == 403
    assert info.value.code == "byok_not_allowed"
    assert CALLER_KEY not in info.value.response.text
    assert not upstream_requests(fake_upstream)


@pytest.mark.parametrize(
    "bad",
    ["zq7", "sk has spaces in-the-middle", "sk-" + "x" * 600],
    ids=["too-short", "spaces", "too-long"],
)
def test_a_malformed_key_is_400_and_never_echoed(
    gw: Logged, fake_upstream: FakeUpstream, bad: str
) -> None:
    resp = asyncio.run(
        request(
            "POST",
            gw.url + "/v1/chat/completions",
            body={"model": "chat", "messages": [{"role": "user", "content": "x"}]},
            headers={"Authorization": f"Bearer {TENANT_KEYS['partner']}", HEADER: bad},
        )
    )
    assert_raw_error(resp, 400, code="invalid_header")
    assert bad not in resp.text
    assert not upstream_requests(fake_upstream)
    with pytest.raises(openai.BadRequestError) as info:
        ask(gw, "partner", "x", bad)
    assert info.value.code == "invalid_header" and bad not in info.value.response.text


def test_a_model_on_another_provider_is_refused_with_the_callers_key(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        ask(gw, "partner", "x", CALLER_KEY, model="elsewhere")
    assert info.value.code == "byok_provider_mismatch"
    assert CALLER_KEY not in info.value.response.text
    assert not upstream_requests(fake_upstream), "the gateway's other key is never spent"
    ask(gw, "partner", "x", model="elsewhere")  # without an own key: the configured one
    assert authorizations(fake_upstream) == [f"Bearer {OTHER_PROVIDER_KEY}"]


# --- a rejected key ----------------------------------------------------------------------------


def test_an_upstream_401_for_the_callers_key_is_the_callers_401(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    before = get(gw, "/metrics").text
    fake_upstream.per_model["chat-up"] = Knobs(
        status=401, error_message=f"Incorrect API key provided: {CALLER_KEY}"
    )
    with pytest.raises(openai.AuthenticationError) as info:
        ask(gw, "partner", "is my key good?", CALLER_KEY)
    error = assert_openai_error(
        401,
        info.value.response.headers,
        info.value.response.text,
        expected_status=401,
        code="provider_key_rejected",
    )
    assert (
        CALLER_KEY not in info.value.response.text and "x-gateway-provider-key" in error["message"]
    )
    sent = upstream_requests(fake_upstream)
    assert [r["body"]["model"] for r in sent] == ["chat-up"], "no retry, no fallback to backup"
    state = breaker(gw, "fake/chat-up")
    assert state["state"] == "closed" and state["failures"] == 0, state
    after = get(gw, "/metrics").text
    assert metric_value(after, "gateway_upstream_failures_total") == metric_value(
        before, "gateway_upstream_failures_total"
    ), "a rejected caller key is not the upstream's failure"
    # The deployment still serves everyone else (the breaker opens after 1 failure here).
    fake_upstream.per_model.clear()
    ask(gw, "closed", "still up?")
    assert upstream_requests(fake_upstream)[-1]["body"]["model"] == "chat-up"


def test_the_gateways_own_rejected_key_still_falls_back(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    """The contrast: the gateway's key rejected is the gateway's problem, not the caller's."""
    fake_upstream.per_model["chat-up"] = Knobs(status=401)
    reply = ask(gw, "closed", "fall back please")
    assert reply.headers["x-gateway-fallback"] == "backup"
    assert [r["body"]["model"] for r in upstream_requests(fake_upstream)] == [
        "chat-up",
        "backup-up",
    ]


def test_an_upstream_4xx_echoing_the_callers_key_is_scrubbed(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.per_model["chat-up"] = Knobs(
        status=400, error_message=f"bad request for key {CALLER_KEY}"
    )
    with pytest.raises(openai.BadRequestError) as info:
        ask(gw, "partner", "x", CALLER_KEY)
    assert CALLER_KEY not in info.value.response.text
    assert "bad request for key" in info.value.message


def test_a_mid_stream_error_does_not_echo_the_callers_key(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    """An upstream error event inside a stream that quotes the caller's key: the SSE error
    event the client receives must not carry it (the gateway's own keys are scrubbed there)."""
    fake_upstream.per_model["chat-up"] = Knobs(
        stream_error_after=1, error_message=f"key {CALLER_KEY} was revoked mid-stream"
    )
    resp = asyncio.run(
        request(
            "POST",
            gw.url + "/v1/chat/completions",
            body={
                "model": "chat",
                "messages": [{"role": "user", "content": "a long answer please"}],
                "stream": True,
            },
            headers={"Authorization": f"Bearer {TENANT_KEYS['partner']}", HEADER: CALLER_KEY},
        )
    )
    events, done = sse_json(resp.sse())
    assert done and "error" in events[-1], events[-1]
    assert CALLER_KEY not in resp.text, f"the caller's key leaked: {events[-1]}"


def test_a_byok_answer_is_not_reported_as_a_fallback(
    gw: Logged, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    """The requested model answered with the caller's key: no x-gateway-fallback header, no
    gateway_fallbacks_total, no `fallback` in the access log (and so the answer may be cached:
    the pipeline keeps no fallback's answer)."""
    before = metric_value(get(gw, "/metrics").text, "gateway_fallbacks_total", model="chat")
    reply = ask(gw, "partner", "who answered?", CALLER_KEY, extra_headers={"x-request-id": "fb-1"})
    assert [r["body"]["model"] for r in upstream_requests(fake_upstream)] == ["chat-up"]
    assert "x-gateway-fallback" not in reply.headers, reply.headers.get("x-gateway-fallback")
    after = metric_value(get(gw, "/metrics").text, "gateway_fallbacks_total", model="chat")
    assert after == before
    (line,) = [entry for entry in gw.lines(server_thread) if entry["request_id"] == "fb-1"]
    assert line["fallback"] is None and line["served_model"] == "chat"


# --- cache, cost, rate limits: by the key's hash ----------------------------------------------


def test_callers_with_different_keys_do_not_share_cache_entries(
    gw: Logged, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    question = "What does the premium plan include?"
    assert ask(gw, "partner", question, CALLER_KEY).headers["x-gateway-cache"] == "miss"
    settle(gw, server_thread)
    assert ask(gw, "partner", question, CALLER_KEY).headers["x-gateway-cache"] == "hit-exact"
    assert ask(gw, "partner", question, CALLER_KEY_2).headers["x-gateway-cache"] == "miss"
    assert ask(gw, "partner", question).headers["x-gateway-cache"] == "miss", (
        "the tenant's own (gateway key) scope is not the caller key's either"
    )
    settle(gw, server_thread)
    assert ask(gw, "partner", question, CALLER_KEY_2).headers["x-gateway-cache"] == "hit-exact"
    assert ask(gw, "partner", question).headers["x-gateway-cache"] == "hit-exact"
    assert authorizations(fake_upstream) == [
        f"Bearer {CALLER_KEY}",
        f"Bearer {CALLER_KEY_2}",
        f"Bearer {CONFIGURED_KEY}",
    ]


def test_byok_cost_has_its_own_series_by_model(gw: Logged) -> None:
    before = get(gw, "/metrics").text
    spent_before = metric_value(before, "gateway_cost_total", model="chat")
    own_before = metric_value(before, "gateway_byok_cost_total", model="chat")
    ask(gw, "partner", "price this on my key", CALLER_KEY)
    middle = get(gw, "/metrics").text
    own = metric_value(middle, "gateway_byok_cost_total", model="chat")
    # usage 10 prompt + 5 completion tokens at 1000 / 2000 per million
    assert own - own_before == pytest.approx(0.02)
    assert metric_value(middle, "gateway_cost_total", model="chat") == spent_before, (
        "the gateway did not pay for it"
    )
    ask(gw, "partner", "price this on the gateway's key")
    after = get(gw, "/metrics").text
    assert metric_value(after, "gateway_cost_total", model="chat") == pytest.approx(
        spent_before + 0.02
    )
    assert metric_value(after, "gateway_byok_cost_total", model="chat") == own


def _series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_new_provider_keys_make_no_new_series(gw: Logged) -> None:
    """Each distinct key a caller makes up is a request like any other on /metrics: the
    series after 50 keys are those after the first, and no key or hash of one is a label."""
    keys = [f"sk-made-up-key-{i:04d}-{'x' * 8}" for i in range(50)]
    ask(gw, "partner", "the first key", keys[0])
    first = _series(get(gw, "/metrics").text)
    for key in keys[1:]:
        ask(gw, "partner", f"on {key}", key)
    text = get(gw, "/metrics").text
    assert _series(text) == first, sorted(_series(text) - first)[:5]
    leaked = [key for key in keys if key in text or hash16(key) in text]
    assert not leaked, f"keys or their hashes in /metrics: {leaked[:3]}"
    assert metric_value(text, "gateway_byok_cost_total", model="chat") > 0


def test_own_keys_are_limited_within_the_tenants_budget(gw: Logged) -> None:
    """Each own key is limited (its own bucket, keyed by the key's hash) and counts against the
    tenant's budget too: making up new keys cannot buy more requests."""
    ask(gw, "metered", "first on key 1", CALLER_KEY)
    with pytest.raises(openai.RateLimitError) as info:
        ask(gw, "metered", "second on key 1", CALLER_KEY)
    assert info.value.code == "rate_limit_exceeded"
    assert CALLER_KEY not in info.value.response.text
    with pytest.raises(openai.RateLimitError):
        ask(gw, "metered", "first on key 2", CALLER_KEY_2)
    with pytest.raises(openai.RateLimitError):
        ask(gw, "metered", "first on the gateway's key")


# --- the key is never kept anywhere -----------------------------------------------------------


def test_the_key_never_appears_in_logs_metrics_admin_or_the_cache(
    gw: Logged,
    fake_upstream: FakeUpstream,
    server_thread: ServerThread,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    earlier = len(gw.lines(server_thread))
    question = "Remember this answer for me"
    for _ in range(2):  # a miss, then (once stored) a hit
        ask(gw, "partner", question, CALLER_KEY)
        ask(gw, "partner", question)
        settle(gw, server_thread)
    stream = client(gw, "partner").chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "and stream this"}],
        stream=True,
        extra_headers={HEADER: CALLER_KEY},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    settle(gw, server_thread)
    fake_upstream.per_model["chat-up"] = Knobs(status=401, error_message=f"bad {CALLER_KEY}")
    with pytest.raises(openai.AuthenticationError) as rejected:
        ask(gw, "partner", "rejected", CALLER_KEY)
    seen.append(rejected.value.response.text)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        ask(gw, "closed", "refused", CALLER_KEY)
    seen.append(refused.value.response.text)
    fake_upstream.per_model.clear()

    for path in (
        "/admin/config",
        "/admin/policies",
        "/admin/policies?tenant=partner&model=chat",
        "/admin/breakers",
        "/admin/cache/stats",
    ):
        resp = get(gw, path, admin=True)
        assert resp.status == 200, (path, resp.text)
        seen.append(resp.text)
    metrics = get(gw, "/metrics").text
    assert 'gateway_byok_cost_total{model="chat"}' in metrics
    seen.append(metrics)
    for path in ("/readyz", "/healthz"):
        seen.append(get(gw, path).text)

    lines = gw.lines(server_thread)[earlier:]
    own = [line for line in lines if line.get("own_key")]
    assert own and {line["own_key"] for line in own} == {hash16(CALLER_KEY)}
    seen.append(gw.sink.getvalue().decode())
    # Everything the server side logged (the SDK's own client-side logs are not the gateway's).
    formatter = logging.Formatter()
    seen += [formatter.format(r) for r in caplog.records if not r.name.startswith(CLIENT_LOGGERS)]

    rows = sqlite3.connect(gw.cache_path).execute("SELECT * FROM entries").fetchall()
    assert rows, "answers were stored"
    seen += [repr(row) for row in rows]
    for file in gw.cache_path.parent.iterdir():  # the database, its WAL and shared memory
        assert CALLER_KEY.encode() not in file.read_bytes(), file.name

    for text in seen:
        assert CALLER_KEY not in text, text[:500]


def test_the_responses_api_uses_the_callers_key_too(
    gw: Logged, fake_upstream: FakeUpstream
) -> None:
    response = client(gw, "partner").responses.create(
        model="chat", input="a response with my key", extra_headers={HEADER: CALLER_KEY}
    )
    assert response.output_text == "Echo: a response with my key"
    assert authorizations(fake_upstream) == [f"Bearer {CALLER_KEY}"]
