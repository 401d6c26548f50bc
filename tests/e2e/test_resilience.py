"""Faults at the upstream, seen through the real OpenAI SDK: retries, fallbacks, circuit
breakers, deadlines, and the level-4 answer when nothing can answer.

One gateway runs the resilience defaults with short timers. Its providers all point at the
shared fake upstream; faults are set per upstream model name, so each model fails its own way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.process import free_port
from tests.clients import sdk_client
from tests.e2e.helpers import assert_openai_error, poll_until, request, sse_json, upstream_requests

Json = dict[str, Any]
ADMIN_KEY = "admin-secret-for-tests"
UNAVAILABLE = "Down for a moment, retry soon."
UNAVAILABLE_ZH = "暂时不可用"
RESET_SECONDS = 0.6
ATTEMPT_CAP = 0.45


def resilience_config(fake_url: str, mode: str = "answer") -> Json:
    def model(name: str, provider: str, **more: Any) -> Json:
        return {"name": name, "provider": provider, "upstream_model": f"{name}-up", **more}

    backup = [
        {"provider": "backup", "upstream_model": "heavy-up", "weight": 3},
        {"provider": "backup", "upstream_model": "light-up", "weight": 1},
    ]
    return {
        "server": {"access_log": False},
        "auth": {"admin_key_env": "ADMIN"},
        "providers": {
            "fake": {
                "type": "openai",
                "base_url": fake_url,
                "timeouts": {"connect": 1, "read": 0.4, "total": 5},
            },
            "backup": {"type": "openai", "base_url": fake_url},
            "dead": {"type": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"},
        },
        "models": [
            model("flaky", "fake", fallbacks=["steady"]),
            model("steady", "backup"),
            model("lonely", "fake"),
            model("patient", "backup", fallbacks=["steady"]),
            {"name": "unreachable", "provider": "dead", "fallbacks": ["steady"]},
            {"name": "balanced", "deployments": backup},
            model("cached", "fake", cache={"enabled": True, "semantic": False}),
            model("vectors", "fake", kind="embedding"),
        ],
        "cache": {"store": {"type": "memory"}},
        "resilience": {
            "retry": {
                "attempts": 3,
                "initial_backoff_ms": 5,
                "max_backoff_ms": 20,
                "max_retry_after_seconds": 2,
            },
            "breaker": {"failures": 3, "reset_seconds": RESET_SECONDS},
            "deadline_seconds": 10,
            "attempt_timeout_seconds": ATTEMPT_CAP,
        },
        "degradation": {
            "unavailable": {
                "mode": mode,
                "retry_after_seconds": 9,
                "message": {"en": UNAVAILABLE, "zh": UNAVAILABLE_ZH},
            }
        },
    }


@pytest.fixture(scope="module")
def rgw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    settings = settings_of(resilience_config(fake.url), {"ADMIN": ADMIN_KEY})
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.fixture
def gw(rgw: GatewayServer, fake_upstream: FakeUpstream) -> GatewayServer:
    """The resilience gateway, its breakers closed, the fake healthy."""
    for breaker in rgw.app[_breakers_key()]:
        breaker.reset()
    return rgw


def _breakers_key() -> Any:
    from gateway.http.keys import BREAKERS

    return BREAKERS


def client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "k", 20)


def ask(gw: GatewayServer, model: str, text: str = "hello", **kw: Any) -> Any:
    return client(gw).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **kw
    )


def fault(fake: FakeUpstream, model: str, **knobs: Any) -> None:
    fake.per_model[model] = Knobs(**knobs)


def calls(fake: FakeUpstream, model: str) -> int:
    return sum(1 for r in upstream_requests(fake) if r["body"].get("model") == model)


def breaker_state(gw: GatewayServer, name: str) -> str:
    for breaker in gw.app[_breakers_key()]:
        if breaker.name == name:
            return breaker.state
    raise AssertionError(f"no breaker {name}")


# --- retries -------------------------------------------------------------------------------


def test_a_500_is_retried_and_the_retry_answers(gw: GatewayServer, fake_upstream: FakeUpstream):
    fault(fake_upstream, "flaky-up", status=500, fail_times=2)
    raw = ask(gw, "flaky")
    assert raw.parse().choices[0].message.content == "Echo: hello"
    assert raw.headers["x-gateway-attempts"] == "3"
    assert "x-gateway-fallback" not in raw.headers
    assert calls(fake_upstream, "flaky-up") == 3


def test_429_retry_after_is_honoured(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    fault(fake_upstream, "lonely-up", status=429, retry_after="1", fail_times=1)
    started = time.monotonic()
    raw = ask(gw, "lonely")
    elapsed = time.monotonic() - started
    assert raw.parse().choices[0].message.content == "Echo: hello"
    assert elapsed >= 0.95, "waited as long as the upstream asked"
    assert calls(fake_upstream, "lonely-up") == 2


def test_a_retry_after_longer_than_allowed_moves_on_at_once(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "flaky-up", status=429, retry_after="30")
    started = time.monotonic()
    raw = ask(gw, "flaky")
    assert time.monotonic() - started < 1.5
    assert raw.headers["x-gateway-fallback"] == "steady"
    assert calls(fake_upstream, "flaky-up") == 1


def test_client_errors_are_neither_retried_nor_fallen_back(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "flaky-up", status=400, error_message="bad request here")
    with pytest.raises(openai.BadRequestError) as info:
        ask(gw, "flaky")
    assert "bad request here" in info.value.message
    assert calls(fake_upstream, "flaky-up") == 1
    assert calls(fake_upstream, "steady-up") == 0


def test_embeddings_are_retried_but_never_fall_back(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "vectors-up", status=503, fail_times=1)
    result = client(gw).embeddings.create(model="vectors", input="x")
    assert len(result.data) == 1
    assert len(upstream_requests(fake_upstream, "/v1/embeddings")) == 2


# --- fallbacks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "knobs",
    [
        {"status": 500},
        {"status": 502, "error_body": "html"},
        {"malformed": True},
        {"latency_ms": 1500},  # past the provider's 0.4 s read timeout
    ],
    ids=["500", "502-html", "malformed", "read-timeout"],
)
def test_the_fallback_model_serves_when_the_primary_fails(
    gw: GatewayServer, fake_upstream: FakeUpstream, knobs: Json
) -> None:
    fault(fake_upstream, "flaky-up", **knobs)
    raw = ask(gw, "flaky")
    completion = raw.parse()
    assert completion.choices[0].message.content == "Echo: hello"
    assert completion.model == "steady-up"
    assert raw.headers["x-gateway-fallback"] == "steady"
    assert calls(fake_upstream, "flaky-up") == 3, "the primary got all its attempts"


def test_connection_refused_falls_back(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    raw = ask(gw, "unreachable")
    assert raw.headers["x-gateway-fallback"] == "steady"
    assert raw.parse().choices[0].message.content == "Echo: hello"


def test_a_stream_with_a_slow_first_byte_falls_back_before_it_starts(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "flaky-up", first_byte_ms=1500)
    with client(gw).chat.completions.with_streaming_response.create(
        model="flaky", messages=[{"role": "user", "content": "a b"}], stream=True
    ) as response:
        assert response.headers["x-gateway-fallback"] == "steady"
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: a b"


def test_a_stream_cut_after_the_first_byte_ends_with_an_error_event_and_is_not_cached(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "cached-up", cut_after=3)
    status, _, events = _raw_stream(gw, "cached", "tell me a story")
    assert status == 200
    chunks, done = sse_json(events)
    assert done, "the stream still ends with [DONE]"
    assert "error" in chunks[-1] and "choices" not in chunks[-1]
    assert calls(fake_upstream, "steady-up") == 0, "no fallback after the first byte"
    fake_upstream.per_model.clear()
    assert _raw_stream(gw, "cached", "tell me a story")[1]["x-gateway-cache"] == "miss"
    assert poll_until(lambda: 'gateway_streams_broken_total{model="cached"}' in _metrics(gw))


def test_weighted_deployments_share_the_traffic(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    async def burst() -> None:
        async with aiohttp.ClientSession() as session:
            body = {"model": "balanced", "messages": [{"role": "user", "content": "x"}]}
            url = gw.url + "/v1/chat/completions"

            async def one() -> None:
                async with session.post(url, json=body) as resp:
                    assert resp.status == 200

            # Two at a time: the fake shares this loop, and an attempt slowed past ATTEMPT_CAP
            # (a busy machine) would be retried, or open a breaker and skew the split.
            for _ in range(100):
                await asyncio.gather(one(), one())

    asyncio.run(burst())
    heavy, light = calls(fake_upstream, "heavy-up"), calls(fake_upstream, "light-up")
    # Every request reached one of the two; on a loaded machine an attempt may time out and
    # be retried, one more call that follows the weights too.
    assert 200 <= heavy + light <= 210, (heavy, light)
    assert 0.62 <= heavy / (heavy + light) <= 0.88, (heavy, light)  # weight 3:1, binomial spread


# --- circuit breaker -----------------------------------------------------------------------


def test_the_breaker_opens_rejects_without_calling_then_recovers(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "lonely-up", status=500)
    first = ask(gw, "lonely")  # three failed attempts open the breaker (failures: 3)
    assert first.headers["x-gateway-level"] == "4"
    assert breaker_state(gw, "fake/lonely-up") == "open"
    sent = calls(fake_upstream, "lonely-up")
    assert sent == 3
    second = ask(gw, "lonely")
    assert calls(fake_upstream, "lonely-up") == sent, "an open breaker makes no network call"
    assert second.headers["x-gateway-degraded"] == "unavailable"
    assert 1 <= int(second.headers["retry-after"]) <= 1 + RESET_SECONDS
    snapshot = _admin(gw, "/admin/breakers")["breakers"]
    assert {"name": "fake/lonely-up", "state": "open"}.items() <= next(
        b for b in snapshot if b["name"] == "fake/lonely-up"
    ).items()
    assert 'gateway_circuit_breaker_state{breaker="fake/lonely-up"} 2.0' in _metrics(gw)

    fake_upstream.per_model.clear()
    time.sleep(RESET_SECONDS + 0.1)
    assert ask(gw, "lonely").parse().choices[0].message.content == "Echo: hello"
    assert breaker_state(gw, "fake/lonely-up") == "closed"


def test_half_open_lets_exactly_one_trial_through_under_load(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "lonely-up", status=500)
    ask(gw, "lonely")
    assert breaker_state(gw, "fake/lonely-up") == "open"
    fault(fake_upstream, "lonely-up", latency_ms=300)  # healthy, but the trial takes a while
    time.sleep(RESET_SECONDS + 0.1)
    before = calls(fake_upstream, "lonely-up")

    async def burst() -> list[str]:
        async with aiohttp.ClientSession() as session:
            body = {"model": "lonely", "messages": [{"role": "user", "content": "x"}]}

            async def one() -> str:
                async with session.post(gw.url + "/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                    return resp.headers.get("x-gateway-level", "ok")

            return await asyncio.gather(*(one() for _ in range(30)))

    levels = asyncio.run(burst())
    assert calls(fake_upstream, "lonely-up") - before == 1, "one trial call, not thirty"
    assert levels.count("ok") == 1 and levels.count("4") == 29
    assert breaker_state(gw, "fake/lonely-up") == "closed"


def test_admin_can_open_and_reset_a_breaker(gw: GatewayServer, fake_upstream: FakeUpstream):
    opened = _admin(gw, "/admin/breakers/fake/flaky-up/open", method="POST")
    assert opened["state"] == "open"
    raw = ask(gw, "flaky")
    assert raw.headers["x-gateway-fallback"] == "steady"
    assert calls(fake_upstream, "flaky-up") == 0, "drained: no call to the open deployment"
    assert _admin(gw, "/admin/breakers/fake/flaky-up/reset", method="POST")["state"] == "closed"
    assert "x-gateway-fallback" not in ask(gw, "flaky").headers


# --- deadlines and level 4 -----------------------------------------------------------------


def test_the_request_deadline_header_bounds_retries_and_waits(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "lonely-up", status=429, retry_after="1")
    started = time.monotonic()
    raw = ask(gw, "lonely", extra_headers={"x-gateway-timeout": "0.5"})
    assert time.monotonic() - started < 0.9, "no retry starts past the deadline"
    assert raw.headers["x-gateway-level"] == "4"


def test_a_slow_upstream_leaves_time_in_the_deadline_for_the_fallback(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "patient-up", latency_ms=5000)  # its provider would wait 60 s
    started = time.monotonic()
    raw = ask(gw, "patient", extra_headers={"x-gateway-timeout": "2.5"})
    assert raw.headers["x-gateway-fallback"] == "steady"
    assert time.monotonic() - started < 2.5
    assert raw.headers["x-gateway-attempts"] == "4", "three capped tries, then the fallback"


def test_a_call_cut_by_a_short_request_deadline_does_not_blame_the_upstream(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "patient-up", latency_ms=5000)
    raw = ask(gw, "patient", extra_headers={"x-gateway-timeout": "0.3"})
    assert raw.headers["x-gateway-level"] == "4"
    assert calls(fake_upstream, "steady-up") == 0, "no doomed call with no time left"
    snapshot = {b["name"]: b for b in _admin(gw, "/admin/breakers")["breakers"]}
    assert snapshot["backup/patient-up"]["failures"] == 0, "the request's budget, not its fault"


def test_attempts_refused_by_an_open_breaker_are_not_counted(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    _admin(gw, "/admin/breakers/fake/flaky-up/open", method="POST")
    raw = ask(gw, "flaky")
    assert raw.headers["x-gateway-fallback"] == "steady"
    assert "x-gateway-attempts" not in raw.headers, "one call went out"


def test_a_bad_deadline_header_is_a_400(gw: GatewayServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        ask(gw, "lonely", extra_headers={"x-gateway-timeout": "soon"})
    assert info.value.code == "invalid_header"


def test_level_4_is_a_normal_completion_with_retry_after(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fault(fake_upstream, "flaky-up", status=500)
    fault(fake_upstream, "steady-up", status=503)
    raw = ask(gw, "flaky")
    completion = raw.parse()
    assert completion.choices[0].message.content == UNAVAILABLE
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "flaky"
    assert raw.headers["x-gateway-degraded"] == "unavailable"
    assert raw.headers["x-gateway-level"] == "4"
    assert raw.headers["retry-after"] == "9"
    chinese = ask(gw, "flaky", text="你好，请帮忙").parse()  # noqa: RUF001
    assert chinese.choices[0].message.content == UNAVAILABLE_ZH


def test_level_4_streams_as_proper_sse(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    fault(fake_upstream, "lonely-up", status=500)
    status, headers, events = _raw_stream(gw, "lonely", "hello")
    assert status == 200 and headers["x-gateway-degraded"] == "unavailable"
    chunks, done = sse_json(events)
    assert done
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == UNAVAILABLE
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_level_4_as_a_503_when_the_policy_says_so(
    server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    settings = settings_of(resilience_config(fake_upstream.url, "error"), {"ADMIN": ADMIN_KEY})
    fault(fake_upstream, "lonely-up", status=500)
    with running_gateway(server_thread, settings) as gw:
        with pytest.raises(openai.InternalServerError) as info:
            ask(gw, "lonely")
        response = info.value.response
        assert_openai_error(
            response.status_code, response.headers, response.text, expected_status=503
        )
        assert response.headers["retry-after"]


def test_no_fault_ever_becomes_a_500(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    faults = [
        {"status": 500},
        {"status": 429, "retry_after": "0"},
        {"malformed": True},
        {"invalid_utf8": True},
        {"status": 502, "error_body": "empty"},
        {"latency_ms": 1000},
    ]
    for knobs in faults:
        fault(fake_upstream, "lonely-up", **knobs)
        for stream in (False, True):
            status, _, body = _raw(gw, "lonely", stream)
            assert status in (200, 503), (knobs, status)
            assert body and b"<html" not in body and b"Traceback" not in body
        for breaker in gw.app[_breakers_key()]:
            breaker.reset()


# --- helpers -------------------------------------------------------------------------------


def _raw(gw: GatewayServer, model: str, stream: bool) -> tuple[int, Any, bytes]:
    body = {"model": model, "messages": [{"role": "user", "content": "x"}], "stream": stream}
    resp = asyncio.run(request("POST", gw.url + "/v1/chat/completions", body=body))
    return resp.status, resp.headers, resp.body


def _raw_stream(gw: GatewayServer, model: str, text: str) -> tuple[int, Any, list[str]]:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": True}
    resp = asyncio.run(request("POST", gw.url + "/v1/chat/completions", body=body))
    return resp.status, resp.headers, resp.sse()


def _metrics(gw: GatewayServer) -> str:
    return asyncio.run(request("GET", gw.url + "/metrics")).text


def _admin(gw: GatewayServer, path: str, method: str = "GET") -> Any:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = asyncio.run(request(method, gw.url + path, headers=headers))
    assert resp.status == 200, resp.text
    return resp.json()
