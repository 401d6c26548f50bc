"""The proxy core end to end, as clients see it: the official OpenAI SDK (sync and async)
against the gateway on a real socket, with the fake upstream (or the demo provider) behind.

Each `sdk` test runs twice, once per client kind. The fake is steered per request through
`extra_body={"fake": {...}}`, which the gateway forwards like any unknown field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.inprocess import GatewayServer
from gateway.upstream.demo import DEMO_NOTICE
from tests.e2e.conftest import GATEWAY_KEY, SHORT_READ_TIMEOUT, SdkFactory
from tests.e2e.helpers import (
    Json,
    assemble_tool_calls,
    assert_openai_error,
    assert_raw_error,
    finish_reasons,
    last_upstream_body,
    poll_until,
    provider_key,
    request,
    sse_json,
    stream_text,
    upstream_requests,
    wire_body,
)
from tests.e2e.sdk import Sdk

CHAT_MODELS = ["demo", "fake-alias", "fake-model", "mapped"]
ALL_MODELS = {*CHAT_MODELS, "fake-embedding", "demo-embedding"}
GENERATED_REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")


def ask(
    content: str = "hello", model: str = "fake-model", fake: Json | None = None, **kwargs: Any
) -> Json:
    """Keyword arguments for `chat.completions.create`, with optional fake-upstream knobs."""
    call: Json = {"model": model, "messages": [{"role": "user", "content": content}], **kwargs}
    if fake is not None:
        call["extra_body"] = {**call.get("extra_body", {}), "fake": fake}
    return call


def status_error(
    sdk_call: Callable[[], object], expected: type[openai.APIStatusError], status: int, **kw: str
) -> openai.APIStatusError:
    """Run a call that must fail with a typed SDK error carrying an OpenAI error body."""
    with pytest.raises(expected) as info:
        sdk_call()
    err = info.value
    assert_openai_error(
        err.status_code, err.response.headers, err.response.text, expected_status=status, **kw
    )
    return err


# --- completions ----------------------------------------------------------------------------


def test_plain_completion(sdk: Sdk) -> None:
    reply = sdk.chat(**ask("hello there"))
    choice = reply.choices[0]
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant"
    assert choice.message.content == "Echo: hello there"
    assert choice.finish_reason == "stop"
    usage = reply.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 5, 15)


def test_streamed_completion(sdk: Sdk) -> None:
    result = sdk.stream(**ask("one two three four"))
    assert result.error is None
    assert result.headers["content-type"].startswith("text/event-stream")
    assert stream_text(result.chunks) == "Echo: one two three four"
    assert len(result.chunks) >= 6, "the text must arrive in several chunks"
    assert {c.id for c in result.chunks} == {result.chunks[0].id}
    assert all(c.object == "chat.completion.chunk" for c in result.chunks)
    with_choices = [c for c in result.chunks if c.choices]
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert finish_reasons(result.chunks) == ["stop"]
    # The gateway asks the upstream for usage (accounting) but must not show it unasked.
    assert all(c.usage is None for c in result.chunks)
    assert all(c.choices for c in result.chunks), "no usage-only chunk was asked for"


def test_streamed_completion_with_usage(sdk: Sdk) -> None:
    result = sdk.stream(**ask("a b", stream_options={"include_usage": True}))
    assert result.error is None
    *body, last = result.chunks
    assert last.choices == []
    assert last.usage is not None and last.usage.total_tokens == 15
    assert all(c.usage is None for c in body)
    assert stream_text(body) == "Echo: a b"


async def test_stream_usage_is_hidden_unless_asked_raw(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    url = gw.url + "/v1/chat/completions"
    plain = await request("POST", url, body=wire_body(ask("x y", stream=True)))
    chunks, done = sse_json(plain.sse())
    assert done and chunks
    assert all("usage" not in c for c in chunks), [c for c in chunks if "usage" in c]
    assert all(c["choices"] for c in chunks)
    upstream = last_upstream_body(fake_upstream)
    assert upstream["stream_options"] == {"include_usage": True}, "asked upstream for accounting"

    asked = await request(
        "POST", url, body=wire_body(ask("x y", stream=True, stream_options={"include_usage": True}))
    )
    chunks, done = sse_json(asked.sse())
    assert done
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15
    assert all(c.get("usage") is None for c in chunks[:-1])


def test_integer_sampling_parameters_are_accepted(sdk: Sdk, fake_upstream: FakeUpstream) -> None:
    reply = sdk.chat(**ask("hi", temperature=1, top_p=1, n=1, max_tokens=16))
    assert reply.choices[0].message.content == "Echo: hi"
    sent = last_upstream_body(fake_upstream)
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (1, 1, 16)


# --- tools ----------------------------------------------------------------------------------

TOOLS: list[Json] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} for a place",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string"},
                    "note": {"type": "string"},
                    "format": {"type": "string"},
                },
                "required": ["city"],
            },
        },
    }
    for name in ("get_weather", "get_time")
]
WEATHER_CALL = {
    "id": "call_weather_0001",
    "name": "get_weather",
    "arguments": '{"city": "Paris", "unit": "celsius", "note": "quotes \\" and ünïcode"}',
}
TIME_CALL = {
    "id": "call_time_0002",
    "name": "get_time",
    "arguments": '{"city": "Tokyo", "format": "24h"}',
}


def run_turn(sdk: Sdk, streamed: bool, **call: Any) -> tuple[str | None, list[Json], str]:
    """One assistant turn, plain or streamed, as (content, tool calls, finish reason)."""
    if streamed:
        result = sdk.stream(**call)
        assert result.error is None, result.error
        calls = assemble_tool_calls(result.chunks)
        reasons = finish_reasons(result.chunks)
        assert len(reasons) == 1, reasons
        if calls:
            fragments = [
                f
                for c in result.chunks
                for choice in c.choices
                for f in choice.delta.tool_calls or []
            ]
            # The tool-call guard holds a call's fragments until it is complete and checked.
            assert len(fragments) == len(calls), "each call arrives whole, once checked"
        return stream_text(result.chunks) or None, calls, reasons[0]
    choice = sdk.chat(**call).choices[0]
    tool_calls = choice.message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in tool_calls)
    calls = [
        {"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
        for c in tool_calls
        if isinstance(c, ChatCompletionMessageFunctionToolCall)
    ]
    return choice.message.content, calls, choice.finish_reason


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(
    "scripted", [[WEATHER_CALL], [WEATHER_CALL, TIME_CALL]], ids=["one", "parallel"]
)
def test_tool_round_trip(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool, scripted: list[Json]
) -> None:
    fake = {"replies": [{"tool_calls": scripted}, {"content": "Sunny in Paris, noon in Tokyo."}]}
    messages: list[Json] = [{"role": "user", "content": "weather and time?"}]
    content, calls, finish = run_turn(
        sdk, streamed, model="fake-model", messages=messages, tools=TOOLS, extra_body={"fake": fake}
    )
    assert finish == "tool_calls"
    assert content is None
    assert calls == [{**c, "type": "function"} for c in scripted]
    for call in calls:
        json.loads(call["arguments"])  # intact enough to parse

    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ],
        }
    )
    messages += [
        {"role": "tool", "tool_call_id": c["id"], "content": f"result of {c['name']}"}
        for c in calls
    ]
    content, calls, finish = run_turn(
        sdk, streamed, model="fake-model", messages=messages, tools=TOOLS, extra_body={"fake": fake}
    )
    assert (content, calls, finish) == ("Sunny in Paris, noon in Tokyo.", [], "stop")
    # The history, tool results included, reached the upstream exactly as sent.
    assert last_upstream_body(fake_upstream)["messages"] == messages


# --- models ---------------------------------------------------------------------------------


def test_models_list(sdk: Sdk) -> None:
    models = sdk.models()
    ids = [m.id for m in models]
    assert set(ids) == ALL_MODELS
    assert len(ids) == len(set(ids))
    owners = {m.id: m.owned_by for m in models}
    assert owners["fake-alias"] == owners["mapped"] == "fake"
    assert owners["demo"] == "demo"
    assert all(m.object == "model" and m.created > 0 for m in models)


def test_models_retrieve(sdk: Sdk) -> None:
    alias = sdk.retrieve("fake-alias")
    assert (alias.id, alias.object, alias.owned_by) == ("fake-alias", "model", "fake")
    err = status_error(
        lambda: sdk.retrieve("no-such-model"), openai.NotFoundError, 404, param="model"
    )
    assert "no-such-model" in err.message


# --- embeddings -----------------------------------------------------------------------------


def fake_vector(text: str, dims: int = 16) -> list[float]:
    """The fake upstream's deterministic embedding (the oracle for exact values)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[j % 32] - 128) / 128 for j in range(dims)]


@pytest.mark.parametrize(("model", "dims"), [("fake-embedding", 16), ("demo-embedding", 256)])
def test_embeddings_float_and_base64_agree(sdk: Sdk, model: str, dims: int) -> None:
    texts = ["the quick brown fox", "a lazy dog"]
    floats = sdk.embed(model=model, input=texts, encoding_format="float")
    decoded = sdk.embed(model=model, input=texts)  # the SDK asks for base64 and decodes it
    for reply in (floats, decoded):
        assert [d.index for d in reply.data] == [0, 1]
        assert all(len(d.embedding) == dims for d in reply.data)
        assert reply.usage.total_tokens > 0
    for a, b in zip(floats.data, decoded.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, rel=1e-6, abs=1e-7)
    assert floats.data[0].embedding != floats.data[1].embedding


def test_fake_embedding_values_and_encoding_reach_upstream(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    floats = sdk.embed(model="fake-embedding", input="alpha", encoding_format="float")
    assert floats.data[0].embedding == fake_vector("alpha")
    assert last_upstream_body(fake_upstream, "/v1/embeddings")["encoding_format"] == "float"
    decoded = sdk.embed(model="fake-embedding", input="alpha", dimensions=8)
    assert decoded.data[0].embedding == pytest.approx(fake_vector("alpha", 8), rel=1e-6)
    sent = last_upstream_body(fake_upstream, "/v1/embeddings")
    assert (sent["encoding_format"], sent["dimensions"], sent["model"]) == (
        "base64",
        8,
        "fake-embedding",
    )


def test_demo_embeddings_are_unit_vectors(sdk: Sdk) -> None:
    reply = sdk.embed(model="demo-embedding", input="hello world", encoding_format="float")
    assert math.sqrt(sum(v * v for v in reply.data[0].embedding)) == pytest.approx(1.0, rel=1e-6)


# --- the demo provider ----------------------------------------------------------------------


def test_demo_plain_and_streamed(sdk: Sdk) -> None:
    plain = sdk.chat(**ask("what is up", model="demo"))
    content = plain.choices[0].message.content
    assert content is not None and content.startswith(DEMO_NOTICE)
    assert content.endswith("You asked: what is up")
    assert plain.choices[0].finish_reason == "stop"
    assert plain.usage is not None and plain.usage.total_tokens > 0

    result = sdk.stream(**ask("what is up", model="demo", stream_options={"include_usage": True}))
    assert result.error is None
    assert stream_text(result.chunks) == content
    assert finish_reasons(result.chunks) == ["stop"]
    assert result.chunks[-1].choices == [] and result.chunks[-1].usage is not None


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_demo_tool_call_round_trip(sdk: Sdk, streamed: bool) -> None:
    messages: list[Json] = [{"role": "user", "content": "weather in Oslo"}]
    content, calls, finish = run_turn(sdk, streamed, model="demo", messages=messages, tools=TOOLS)
    assert finish == "tool_calls" and content is None
    [call] = calls
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    assert json.loads(call["arguments"]) == {"city": "weather in Oslo"}
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "12 C and rain"},
    ]
    content, calls, finish = run_turn(sdk, streamed, model="demo", messages=messages, tools=TOOLS)
    assert (calls, finish) == ([], "stop")
    assert content == f"{DEMO_NOTICE} The tool returned: 12 C and rain"


# --- errors as the SDK's typed exceptions ---------------------------------------------------


def test_unknown_model_is_not_found_listing_models(sdk: Sdk) -> None:
    err = status_error(
        lambda: sdk.chat(**ask(model="gpt-nope")),
        openai.NotFoundError,
        404,
        code="model_not_found",
        param="model",
    )
    assert "gpt-nope" in err.message
    for name in CHAT_MODELS:
        assert name in err.message


def test_upstream_400_keeps_status_and_message(sdk: Sdk) -> None:
    message = "This model's maximum context length is 8 tokens (fake)"
    err = status_error(
        lambda: sdk.chat(**ask(fake={"status": 400, "error_message": message})),
        openai.BadRequestError,
        400,
        code="fake_400",
    )
    assert message in err.message


# The shared gateway tries once and answers errors (harness/fake_settings.py): when the only
# upstream fails, the client gets a 503 whose code names the cause, with Retry-After.


def test_upstream_429_keeps_retry_after(sdk: Sdk) -> None:
    err = status_error(
        lambda: sdk.chat(
            **ask(fake={"status": 429, "retry_after": "7", "error_message": "slow down"})
        ),
        openai.InternalServerError,
        503,
        code="fake_429",  # the upstream's own code
    )
    assert err.response.headers["retry-after"] == "7"
    assert "slow down" in err.message


@pytest.mark.parametrize("status", [500, 502, 503])
def test_upstream_5xx_is_503(sdk: Sdk, status: int) -> None:
    err = status_error(
        lambda: sdk.chat(**ask(fake={"status": status})),
        openai.InternalServerError,
        503,
        code="upstream_error",
    )
    assert f"HTTP {status}" in err.message


@pytest.mark.parametrize(
    ("upstream_status", "body", "expected"),
    [(502, "html", 503), (500, "text", 503), (503, "empty", 503), (400, "html", 400)],
)
def test_upstream_non_json_error_bodies_stay_out(
    sdk: Sdk, upstream_status: int, body: str, expected: int
) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        sdk.chat(
            **ask(
                fake={
                    "status": upstream_status,
                    "error_body": body,
                    "error_message": "raw upstream words",
                }
            )
        )
    response = info.value.response
    error = assert_openai_error(
        response.status_code, response.headers, response.text, expected_status=expected
    )
    assert "Bad Gateway</h1>" not in response.text
    assert "raw upstream words" not in response.text, "non-JSON upstream text is never shown"
    assert error["message"]


@pytest.mark.parametrize("status", [401, 403])
def test_upstream_credential_failure_is_a_502_configuration_fault_without_key(
    sdk: Sdk, gw: GatewayServer, status: int
) -> None:
    key = provider_key(gw.settings)
    err = status_error(
        lambda: sdk.chat(**ask(fake={"status": status, "error_message": f"bad key {key}"})),
        openai.InternalServerError,
        502,
        code="upstream_auth_failed",
    )
    assert err.response.headers["x-should-retry"] == "false"
    assert key not in err.response.text
    assert key[-6:] not in err.response.text


def test_provider_key_is_scrubbed_from_upstream_messages(sdk: Sdk, gw: GatewayServer) -> None:
    key = provider_key(gw.settings)
    err = status_error(
        lambda: sdk.chat(**ask(fake={"status": 400, "error_message": f"key {key} is wrong"})),
        openai.BadRequestError,
        400,
    )
    assert key not in err.response.text
    assert "key *** is wrong" in err.message


@pytest.mark.parametrize("knob", ["malformed", "invalid_utf8"])
def test_malformed_upstream_json_is_503(sdk: Sdk, knob: str) -> None:
    status_error(
        lambda: sdk.chat(**ask(fake={knob: True})),
        openai.InternalServerError,
        503,
        code="upstream_invalid_response",
    )


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_upstream_timeout_is_503(
    sdk_factory: SdkFactory, short_timeout_gateway: GatewayServer, streamed: bool
) -> None:
    sdk = sdk_factory(short_timeout_gateway.url)
    slow = SHORT_READ_TIMEOUT * 1000 * 4
    knob = "first_byte_ms" if streamed else "latency_ms"
    _assert_refused_before_any_chunk(sdk, streamed, 503, "upstream_timeout", fake={knob: slow})


def _assert_refused_before_any_chunk(
    sdk: Sdk, streamed: bool, status: int, code: str, **request: Any
) -> None:
    """The request (plain or streamed) fails with this OpenAI error before any chunk."""
    if streamed:
        result = sdk.stream(**ask(**request))
        assert result.chunks == [] and isinstance(result.error, openai.APIStatusError)
        err = result.error
    else:
        with pytest.raises(openai.APIStatusError) as info:
            sdk.chat(**ask(**request))
        err = info.value
    assert_openai_error(
        err.status_code, err.response.headers, err.response.text, expected_status=status, code=code
    )


def test_upstream_silence_mid_stream_is_a_timeout_event(
    sdk_factory: SdkFactory, short_timeout_gateway: GatewayServer
) -> None:
    sdk = sdk_factory(short_timeout_gateway.url)
    result = sdk.stream(**ask(fake={"chunk_delay_ms": SHORT_READ_TIMEOUT * 1000 * 4}))
    assert len(result.chunks) == 1 and result.chunks[0].choices[0].delta.role == "assistant"
    assert isinstance(result.error, openai.APIError)
    assert not isinstance(result.error, openai.APIStatusError)
    assert isinstance(result.error.body, dict)
    assert result.error.body.get("code") == "upstream_timeout"


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_connection_refused_by_a_provider_that_never_answered_is_a_502_fault(
    sdk_factory: SdkFactory, unreachable_gateway: GatewayServer, streamed: bool
) -> None:
    sdk = sdk_factory(unreachable_gateway.url)
    _assert_refused_before_any_chunk(sdk, streamed, 502, "upstream_unreachable")
    assert sdk.chat(**ask(model="demo")).choices[0].message.content, "other providers still work"


def test_gateway_key_is_checked(sdk_factory: SdkFactory, keyed_gateway: GatewayServer) -> None:
    wrong = sdk_factory(keyed_gateway.url, api_key="sk-wrong")
    status_error(
        lambda: wrong.chat(**ask()), openai.AuthenticationError, 401, code="invalid_api_key"
    )
    status_error(lambda: wrong.models(), openai.AuthenticationError, 401)
    right = sdk_factory(keyed_gateway.url, api_key=GATEWAY_KEY)
    assert right.chat(**ask("hi")).choices[0].message.content == "Echo: hi"


# --- streamed errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "status", "expected"),
    [
        ({"status": 500}, 503, openai.InternalServerError),
        ({"status": 400}, 400, openai.BadRequestError),
        ({"status": 429, "retry_after": "3"}, 503, openai.InternalServerError),
        ({"status": 401}, 502, openai.InternalServerError),
    ],
    ids=["500", "400", "429", "401"],
)
def test_stream_failing_before_first_byte_is_an_http_error(
    sdk: Sdk, knobs: Json, status: int, expected: type[openai.APIStatusError]
) -> None:
    result = sdk.stream(**ask(fake=knobs))
    assert result.chunks == []
    assert isinstance(result.error, expected), repr(result.error)
    response = result.error.response
    assert_openai_error(
        response.status_code, response.headers, response.text, expected_status=status
    )
    if knobs.get("retry_after"):
        assert response.headers["retry-after"] == "3"


# "Echo: a b c d e" streams as: role, 6 words, finish (then the usage chunk the gateway hides).
BROKEN_CONTENT = "a b c d e"
BROKEN_STREAMS = [
    pytest.param({"cut_after": 3}, 3, "upstream_error", id="cut_after"),
    pytest.param(
        {"stream_error_after": 2, "error_message": "overloaded (fake)"},
        2,
        "upstream_error",
        id="stream_error_after",
    ),
    pytest.param({"malformed": True}, 1, "upstream_invalid_response", id="malformed_chunk"),
    pytest.param({"invalid_utf8": True}, 1, "upstream_invalid_response", id="invalid_utf8_chunk"),
    pytest.param({"no_done": True}, 8, "upstream_stream_cut", id="no_done"),
]


@pytest.mark.parametrize(("knobs", "delivered", "code"), BROKEN_STREAMS)
async def test_broken_stream_raw_sse(
    gw: GatewayServer, knobs: Json, delivered: int, code: str
) -> None:
    """After the headers, a failure is the chunks so far, one error event, then [DONE]."""
    resp = await request(
        "POST",
        gw.url + "/v1/chat/completions",
        body=wire_body(ask(BROKEN_CONTENT, stream=True, fake=knobs)),
    )
    assert resp.status == 200
    assert resp.content_type.startswith("text/event-stream")
    events, done = sse_json(resp.sse())
    assert done, "the gateway must end a broken stream with [DONE]"
    *chunks, error_event = events
    assert len(chunks) == delivered
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert stream_text(chunks) == "Echo: a b c d e"[: len(stream_text(chunks))]
    body = json.dumps(error_event)
    error = assert_openai_error(
        200, {"content-type": "application/json"}, body, expected_status=200, code=code
    )
    assert error["type"] == "upstream_error"
    if "error_message" in knobs:
        assert knobs["error_message"] in error["message"]
    if knobs.get("no_done"):
        assert stream_text(chunks) == "Echo: a b c d e" and finish_reasons(chunks) == ["stop"]


@pytest.mark.parametrize(("knobs", "delivered", "code"), BROKEN_STREAMS)
def test_broken_stream_raises_in_sdk(sdk: Sdk, knobs: Json, delivered: int, code: str) -> None:
    result = sdk.stream(**ask(BROKEN_CONTENT, fake=knobs))
    assert len(result.chunks) == delivered
    assert isinstance(result.error, openai.APIError)
    assert not isinstance(result.error, openai.APIStatusError), "the status was already 200"
    assert isinstance(result.error.body, dict) and result.error.body.get("code") == code
    assert "provider 'fake'" in result.error.message


# --- wire fidelity --------------------------------------------------------------------------


def test_unknown_request_fields_reach_upstream_untouched(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    messages = [
        {"role": "system", "content": "be brief", "x_cache_hint": {"ttl": 60}},
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
    ]
    extra = {
        "x_custom": {"nested": [1, "two", None, 3.5, True, {"deep": {"er": []}}]},
        "reasoning_effort": "low",
        "fake": {"content": "ok"},
    }
    reply = sdk.chat(
        model="fake-model",
        messages=messages,
        seed=7,
        user="user-1",
        logit_bias={"50256": -100},
        response_format={"type": "json_object"},
        metadata={"k": "v"},
        extra_body=extra,
    )
    assert reply.choices[0].message.content == "ok"
    expected = {
        "model": "fake-model",
        "messages": messages,
        "seed": 7,
        "user": "user-1",
        "logit_bias": {"50256": -100},
        "response_format": {"type": "json_object"},
        "metadata": {"k": "v"},
        **extra,
    }
    assert last_upstream_body(fake_upstream) == expected


def test_unknown_request_fields_reach_upstream_when_streamed(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    result = sdk.stream(**ask("hi", extra_body={"x_custom": [{"a": 1}], "top_k": 5}))
    assert result.error is None
    sent = last_upstream_body(fake_upstream)
    assert (sent["x_custom"], sent["top_k"], sent["stream"]) == ([{"a": 1}], 5, True)
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_public_model_name_is_mapped_to_upstream_name(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    assert sdk.chat(**ask("hi", model="mapped")).choices[0].message.content == "Echo: hi"
    assert last_upstream_body(fake_upstream)["model"] == "upstream-name"
    assert stream_text(sdk.stream(**ask("hi", model="fake-alias")).chunks) == "Echo: hi"
    assert last_upstream_body(fake_upstream)["model"] == "fake-model"


def test_provider_key_and_config_headers_reach_upstream(
    sdk: Sdk, gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    sdk.chat(**ask())
    headers = {k.lower(): v for k, v in upstream_requests(fake_upstream)[-1]["headers"].items()}
    assert headers["authorization"] == f"Bearer {provider_key(gw.settings)}"
    assert headers["x-provider-extra"] == "from-config"
    assert "client-key" not in json.dumps(headers), "the client's key is never forwarded"


RESPONSE_EXTRA: Json = {"x_provider_meta": {"region": "eu-west", "ids": [1, 2]}, "x_flag": True}


def test_unknown_response_fields_come_back_plain(sdk: Sdk) -> None:
    raw = sdk.chat_raw(
        **ask(logprobs=True, fake={"reasoning_content": "thinking hard", "extra": RESPONSE_EXTRA})
    )
    reply = raw.completion
    assert reply.system_fingerprint == "fp_fake"
    assert reply.service_tier == "default"
    assert reply.model_extra == RESPONSE_EXTRA
    message = reply.choices[0].message
    assert message.model_extra is not None
    assert message.model_extra["reasoning_content"] == "thinking hard"
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content == [] and logprobs.refusal is None


def test_unknown_response_fields_come_back_streamed(sdk: Sdk) -> None:
    result = sdk.stream(**ask(fake={"reasoning_content": "step by step", "extra": RESPONSE_EXTRA}))
    assert result.error is None
    for chunk in result.chunks:
        assert (chunk.system_fingerprint, chunk.service_tier) == ("fp_fake", "default")
        assert chunk.model_extra == RESPONSE_EXTRA
    reasoning = [
        (choice.delta.model_extra or {}).get("reasoning_content")
        for chunk in result.chunks
        for choice in chunk.choices
    ]
    assert "step by step" in reasoning


def test_request_id_is_echoed_or_generated(sdk: Sdk) -> None:
    given = sdk.chat_raw(**ask(extra_headers={"X-Request-Id": "trace-42.a:b"}))
    assert given.headers["x-request-id"] == "trace-42.a:b"
    generated = [sdk.chat_raw(**ask()).headers["x-request-id"] for _ in range(2)]
    assert all(GENERATED_REQUEST_ID.match(rid) for rid in generated)
    assert generated[0] != generated[1]
    unsafe = sdk.chat_raw(**ask(extra_headers={"X-Request-Id": "bad id\twith spaces"}))
    assert GENERATED_REQUEST_ID.match(unsafe.headers["x-request-id"])
    streamed = sdk.stream(**ask(extra_headers={"X-Request-Id": "stream-7"}))
    assert streamed.headers["x-request-id"] == "stream-7"
    err = status_error(
        lambda: sdk.chat(**ask(model="nope", extra_headers={"X-Request-Id": "err-1"})),
        openai.NotFoundError,
        404,
    )
    assert err.response.headers["x-request-id"] == "err-1"


async def test_request_id_on_raw_error_responses(gw: GatewayServer) -> None:
    resp = await request("GET", gw.url + "/v1/nowhere", headers={"X-Request-Id": "raw-404"})
    assert_raw_error(resp, 404)
    assert resp.headers["x-request-id"] == "raw-404"


# --- streaming behaviour: disconnects and latency -------------------------------------------


def test_client_disconnect_mid_stream_cancels_upstream(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    first = sdk.first_chunk_then_close(**ask("a b c d", fake={"chunk_delay_ms": 10_000}))
    assert first.choices[0].delta.role == "assistant"
    assert poll_until(lambda: fake_upstream.stats["disconnects"] >= 1, timeout=3), (
        fake_upstream.stats
    )
    assert poll_until(lambda: fake_upstream.stats["in_flight"] == 0, timeout=3), fake_upstream.stats


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_client_giving_up_before_the_answer_cancels_upstream(
    sdk_factory: SdkFactory, gw: GatewayServer, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    impatient = sdk_factory(gw.url, timeout=0.3)
    if streamed:
        error = impatient.stream(**ask(fake={"first_byte_ms": 10_000})).error
    else:
        with pytest.raises(openai.APITimeoutError) as info:
            impatient.chat(**ask(fake={"latency_ms": 10_000}))
        error = info.value
    assert isinstance(error, openai.APITimeoutError), repr(error)
    assert poll_until(lambda: fake_upstream.stats["disconnects"] >= 1, timeout=3), (
        fake_upstream.stats
    )


def test_first_chunk_is_not_buffered(sdk: Sdk) -> None:
    delay = 0.3
    result = sdk.stream(**ask("hi", fake={"chunk_delay_ms": delay * 1000}))
    assert result.error is None and stream_text(result.chunks) == "Echo: hi"
    first, last = result.arrivals[0], result.arrivals[-1]
    assert last - first >= 2 * delay * 0.9, result.arrivals
    assert first < delay, f"first chunk after {first:.2f}s: the gateway buffered the stream"
