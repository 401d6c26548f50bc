"""Upstream 200s that only look valid, seen through the real OpenAI SDK: another content type
over a JSON body, no choices, a choice without its message or delta, an error body, a stream
of no chunks or of chunks that are not chunks, a JSON answer to a stream request.

Each is an invalid upstream answer (gateway/upstream/shapes.py): retried on its deployment,
fallen back from, counted in gateway_upstream_invalid_answers_total by reason, the level-4
answer (or a 503) when nothing else answers, and never cached. Valid answers with the fields a
strict check might trip on (null content beside tool calls, a refusal, unknown fields, an
Azure prompt-filter chunk) still pass untouched and conform to the OpenAI schemas.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from aiohttp import web

from gateway.testing.fake_upstream import FakeUpstream, Knobs, Received
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.metrics import metric_value
from tests.clients import sdk_client
from tests.e2e.helpers import (
    assert_conforms,
    assert_openai_error,
    poll_until,
    request,
    upstream_requests,
)

Json = dict[str, Any]
UNAVAILABLE = "Nothing can answer right now."
ATTEMPTS = 2

# (knobs, stream) -> the `reason` label it is counted under. A stream whose first event is an
# error is OpenAI's own way to report a failure in a stream: an upstream error (counted as
# `server_error` in gateway_upstream_failures_total), not an answer of the wrong shape.
PLAIN: dict[str, tuple[Json, str]] = {
    "text/html": ({"content_type": "text/html"}, "content_type"),
    "text/plain": ({"content_type": "text/plain"}, "content_type"),
    "no-content-type": ({"content_type": ""}, "content_type"),
    "not-json": ({"shape": "not_json"}, "not_json"),
    "no-choices": ({"shape": "no_choices"}, "choices"),
    "choices-not-a-list": ({"shape": "choices_not_list"}, "choices"),
    "empty-choices": ({"shape": "empty_choices"}, "choices"),
    "no-message": ({"shape": "no_message"}, "message"),
    "message-not-an-object": ({"shape": "message_not_object"}, "message"),
    "error-in-a-200": ({"shape": "error_object"}, "error_object"),
}
STREAMED: dict[str, tuple[Json, str | None]] = {
    "sse-as-application/json": ({"content_type": "application/json"}, "content_type"),
    "sse-as-text/html": ({"content_type": "text/html"}, "content_type"),
    "sse-without-content-type": ({"content_type": ""}, "content_type"),
    "json-answer": ({"shape": "json_answer"}, "content_type"),
    "not-json": ({"shape": "not_json"}, "not_json"),
    "no-choices": ({"shape": "no_choices"}, "chunk"),
    "choices-not-a-list": ({"shape": "choices_not_list"}, "chunk"),
    "empty-choices": ({"shape": "empty_choices"}, "empty_stream"),
    "no-delta": ({"shape": "no_message"}, "delta"),
    "delta-not-an-object": ({"shape": "message_not_object"}, "delta"),
    "not-chunks": ({"shape": "not_chunk"}, "chunk"),
    "no-chunks": ({"shape": "no_chunks"}, "empty_stream"),
    "error-event-first": ({"shape": "error_object"}, None),
}
CASES = [(name, False) for name in PLAIN] + [(name, True) for name in STREAMED]
IDS = [f"{'stream' if stream else 'plain'}-{name}" for name, stream in CASES]


def case(name: str, stream: bool) -> tuple[Json, str | None]:
    return STREAMED[name] if stream else PLAIN[name]


def config(fake_url: str, mode: str) -> Json:
    cached = {"enabled": True, "semantic": False}
    return {
        "server": {"access_log": False},
        "providers": {"fake": {"type": "openai", "base_url": fake_url}},
        "models": [
            {
                "name": "shaky",
                "provider": "fake",
                "upstream_model": "shaky-up",
                "fallbacks": ["steady"],
                "cache": cached,
            },
            {"name": "steady", "provider": "fake", "upstream_model": "steady-up"},
            {"name": "alone", "provider": "fake", "upstream_model": "alone-up", "cache": cached},
            {
                "name": "vectors",
                "provider": "fake",
                "upstream_model": "vectors-up",
                "kind": "embedding",
            },
        ],
        "cache": {"store": {"type": "memory"}},
        "resilience": {
            "retry": {"attempts": ATTEMPTS, "initial_backoff_ms": 1, "max_backoff_ms": 2},
            "breaker": {"failures": 1000},
        },
        "degradation": {
            "unavailable": {"mode": mode, "retry_after_seconds": 7, "message": {"en": UNAVAILABLE}}
        },
    }


@pytest.fixture(scope="module")
def answering(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    with running_gateway(server_thread, settings_of(config(fake.url, "answer"), {})) as server:
        yield server


@pytest.fixture(scope="module")
def erring(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    with running_gateway(server_thread, settings_of(config(fake.url, "error"), {})) as server:
        yield server


def breakers(gw: GatewayServer) -> Any:
    from gateway.http.keys import BREAKERS

    return gw.app[BREAKERS]


@pytest.fixture
def gw(answering: GatewayServer, fake_upstream: FakeUpstream) -> GatewayServer:
    for breaker in breakers(answering):
        breaker.reset()
    return answering


def ask(gw: GatewayServer, model: str, text: str, stream: bool) -> tuple[dict[str, str], Any]:
    """The answer's headers, and its completion (a stream: its chunks)."""
    client = sdk_client(gw.url, "k", 20)
    messages = [{"role": "user", "content": text}]
    if not stream:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        return dict(raw.headers), raw.parse()
    with client.chat.completions.with_streaming_response.create(
        model=model, messages=messages, stream=True
    ) as response:
        return dict(response.headers), list(response.parse())


def calls(fake: FakeUpstream, model: str) -> int:
    return sum(1 for r in upstream_requests(fake) if r["body"].get("model") == model)


def invalid_count(gw: GatewayServer, deployment: str, reason: str) -> float:
    text = asyncio.run(request("GET", gw.url + "/metrics")).text
    return metric_value(
        text, "gateway_upstream_invalid_answers_total", deployment=deployment, reason=reason
    )


def text_of(answer: Any, stream: bool) -> str:
    if not stream:
        return str(answer.choices[0].message.content)
    deltas = [c.choices[0].delta for c in answer if c.choices]
    return "".join(delta.content or "" for delta in deltas if delta is not None)


@pytest.mark.parametrize(("name", "stream"), CASES, ids=IDS)
def test_the_fallback_answers_instead(
    gw: GatewayServer, fake_upstream: FakeUpstream, name: str, stream: bool
) -> None:
    knobs, reason = case(name, stream)
    fake_upstream.per_model["shaky-up"] = Knobs(**knobs)
    before = invalid_count(gw, "fake/shaky-up", reason) if reason else 0.0
    headers, answer = ask(gw, "shaky", f"fall back {name}", stream)
    assert text_of(answer, stream) == f"Echo: fall back {name}"
    assert headers["x-gateway-fallback"] == "steady"
    assert headers["x-gateway-attempts"] == str(ATTEMPTS + 1)
    assert calls(fake_upstream, "shaky-up") == ATTEMPTS, "retried on its deployment first"
    if reason:
        assert poll_until(lambda: invalid_count(gw, "fake/shaky-up", reason) == before + ATTEMPTS)


@pytest.mark.parametrize(("name", "stream"), CASES, ids=IDS)
def test_with_nothing_else_the_level_4_answer_and_nothing_cached(
    gw: GatewayServer, fake_upstream: FakeUpstream, name: str, stream: bool
) -> None:
    knobs, _ = case(name, stream)
    fake_upstream.per_model["alone-up"] = Knobs(**knobs)
    question = f"alone {name} {stream}"
    for asked in (1, 2):  # the second is no cache hit: the upstream is asked again
        headers, answer = ask(gw, "alone", question, stream)
        assert headers["x-gateway-level"] == "4" and headers["x-gateway-degraded"] == "unavailable"
        assert text_of(answer, stream) == UNAVAILABLE
        assert headers.get("x-gateway-cache") != "hit-exact"
        assert calls(fake_upstream, "alone-up") == ATTEMPTS * asked
    fake_upstream.per_model.pop("alone-up")
    headers, answer = ask(gw, "alone", question, stream)
    assert text_of(answer, stream) == f"Echo: {question}", "a real answer, not a stored one"
    assert headers.get("x-gateway-cache") == "miss"


@pytest.mark.parametrize(
    ("name", "stream"),
    [("text/html", False), ("empty-choices", False), ("no-chunks", True), ("json-answer", True)],
    ids=["plain-text/html", "plain-empty-choices", "stream-no-chunks", "stream-json-answer"],
)
def test_in_error_mode_a_503_names_the_invalid_answer(
    erring: GatewayServer, fake_upstream: FakeUpstream, name: str, stream: bool
) -> None:
    fake_upstream.per_model["alone-up"] = Knobs(**case(name, stream)[0])
    body = {"model": "alone", "messages": [{"role": "user", "content": name}], "stream": stream}
    reply = asyncio.run(request("POST", erring.url + "/v1/chat/completions", body=body))
    error = assert_openai_error(reply.status, reply.headers, reply.body, expected_status=503)
    assert error["code"] == "upstream_invalid_response", error
    assert reply.headers["Retry-After"] == "7"


def test_an_invalid_answer_counts_against_the_breaker(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """A deployment that answers 200s that are not completions (a login page behind a proxy,
    a wrong base URL) fails every request the same way: its breaker counts it like a 5xx."""
    fake_upstream.per_model["alone-up"] = Knobs(content_type="text/html")
    ask(gw, "alone", "breaker", False)
    (state,) = [b.snapshot() for b in breakers(gw) if b.name == "fake/alone-up"]
    assert state.failures == ATTEMPTS


@pytest.mark.parametrize(
    "knobs",
    [{"content_type": "text/html"}, {"shape": "empty_choices"}, {"shape": "error_object"}],
    ids=["text/html", "empty-data", "error-in-a-200"],
)
def test_embeddings_of_an_invalid_answer_are_retried_then_a_503(
    gw: GatewayServer, fake_upstream: FakeUpstream, knobs: Json
) -> None:
    fake_upstream.per_model["vectors-up"] = Knobs(**knobs)
    with pytest.raises(openai.APIStatusError) as info:
        sdk_client(gw.url, "k", 20).embeddings.create(model="vectors", input="x")
    assert info.value.status_code == 503
    assert len(upstream_requests(fake_upstream, "/v1/embeddings")) == ATTEMPTS


# --- valid answers still pass, untouched ------------------------------------------------------

TOOL_REPLY = {"replies": [{"content": None, "tool_calls": [{"name": "look", "arguments": {}}]}]}
VALID = {
    "content-null-with-tool-calls": TOOL_REPLY,
    "unknown-fields": {"extra": {"x_provider_meta": {"region": "eu"}, "prompt_filter_results": []}},
    "json-with-charset": {"content_type": "application/json; charset=utf-8"},
    "vendor-json-type": {"content_type": "application/vnd.provider+json"},
}


# A content type is a plain answer's: a stream's is the fake's own text/event-stream.
VALID_CASES = [
    pytest.param(name, stream, id=f"{name}-{'stream' if stream else 'plain'}")
    for name in VALID
    for stream in (False, True)
    if not (stream and "content_type" in VALID[name])
]


@pytest.mark.parametrize(("name", "stream"), VALID_CASES)
def test_valid_answers_pass_and_conform(
    gw: GatewayServer, fake_upstream: FakeUpstream, name: str, stream: bool
) -> None:
    knobs = VALID[name]
    fake_upstream.per_model["alone-up"] = Knobs(**knobs)
    question = f"valid {name} {stream}"  # each its own: a cached answer replays differently
    body = {"model": "alone", "messages": [{"role": "user", "content": question}], "stream": stream}
    reply = asyncio.run(request("POST", gw.url + "/v1/chat/completions", body=body))
    assert reply.status == 200 and "x-gateway-level" not in reply.headers, reply.text
    if not stream:
        answer = reply.json()
        assert_conforms(answer, "CreateChatCompletionResponse")
        message = answer["choices"][0]["message"]
        assert "refusal" in message
        if name == "content-null-with-tool-calls":
            assert message["content"] is None and message["tool_calls"]
        if name == "unknown-fields":
            assert answer["x_provider_meta"] == {"region": "eu"}
        return
    events = [e for e in reply.sse() if e != "[DONE]"]
    chunks = [json.loads(e) for e in events]
    for chunk in chunks:
        assert_conforms(chunk, "CreateChatCompletionStreamResponse")
    if name == "unknown-fields":
        missing = [c for c in chunks if c.get("x_provider_meta") != {"region": "eu"}]
        assert not missing, missing


AZURE_STREAM = (
    b'data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":'
    b'[{"prompt_index":0,"content_filter_results":{}}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"finish_reason":null,"content_filter_results":{"hate":{"filtered":false}}}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def test_an_azure_stream_with_filter_chunks_passes(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """Azure OpenAI opens a stream with a chunk of no choices (prompt filter results, an empty
    `object`) and annotates choices without a delta (its asynchronous content filter)."""

    def azure(received: Received) -> web.StreamResponse | None:
        if received.model != "alone-up":
            return None
        return web.Response(body=AZURE_STREAM, content_type="text/event-stream")

    fake_upstream.inject(azure)
    headers, chunks = ask(gw, "alone", "azure", True)
    assert "x-gateway-level" not in headers
    assert text_of(chunks, True) == "Hi"
    assert chunks[0].prompt_filter_results == [{"prompt_index": 0, "content_filter_results": {}}]
