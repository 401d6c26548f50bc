"""Native passthrough at the adapter: `native` and `native_stream` of the OpenAI-compatible
adapter against the fake upstream on a real socket, the events written again by
`NativeEvents` byte for byte as the upstream sent them, every answer and event checked
against the official schemas, and the shape checks and stream ends that make a bad native
answer an upstream failure."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config import build_settings, parse_config
from gateway.errors import GatewayError, InvalidRequest, InvalidUpstreamAnswer, UpstreamError
from gateway.reply.native import NativeEvents, NativeUsage, chat_usage
from gateway.testing.fake_upstream import FakeUpstream, Received
from gateway.upstream.demo import DemoProvider
from gateway.upstream.native import EVENT, NamedEventReader
from gateway.upstream.openai_compat import OpenAICompatible
from tests.e2e.helpers import assert_conforms

Json = dict[str, Any]
ASK_RESPONSES: Json = {
    "model": "m",
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather in Oslo"}]}],
    "tools": [{"type": "web_search"}],
}
ASK_COMPLETIONS: Json = {"model": "m", "prompt": "a b", "echo": True, "logprobs": 1}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
async def provider(fake: FakeUpstream) -> AsyncIterator[OpenAICompatible]:
    config = f"""
providers:
  up: {{type: openai, base_url: "{fake.url}", native: [completions, responses]}}
models: [{{name: m, provider: up}}]
"""
    settings = build_settings(parse_config(config), "<t>", {})
    adapter = OpenAICompatible(settings.providers["up"], settings.secrets())
    yield adapter
    await adapter.close()


async def _raw(fake: FakeUpstream, path: str, body: Json) -> bytes:
    async with (
        aiohttp.ClientSession() as session,
        session.post(fake.url + path, json=body) as resp,
    ):
        return await resp.read()


def _replaying(raw: bytes) -> Any:
    """A fault that answers every request with the recorded stream `raw`, so what the gateway
    writes can be compared with it byte for byte (the fake's ids differ per request)."""

    def fault(received: Received) -> web.StreamResponse:
        return web.Response(body=raw, content_type="text/event-stream")

    return fault


async def _events(provider: OpenAICompatible, endpoint: str, body: Json) -> list[Json]:
    return [e async for batch in provider.native_stream(endpoint, body) for e in batch]


async def test_a_plain_response_with_a_web_search_conforms(provider: OpenAICompatible) -> None:
    answer = await provider.native("responses", ASK_RESPONSES)
    assert_conforms(answer, "Response")
    search, message = answer["output"]
    assert search["type"] == "web_search_call" and search["action"]["query"] == "weather in Oslo"
    assert message["content"][0]["text"] == "Echo: weather in Oslo"
    assert chat_usage(answer["usage"]) == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
    }


async def test_a_plain_completion_conforms(provider: OpenAICompatible) -> None:
    answer = await provider.native("completions", ASK_COMPLETIONS)
    assert_conforms(answer, "CreateCompletionResponse")
    assert answer["choices"][0]["text"] == "a bEcho: a b"


async def test_a_responses_stream_is_relayed_byte_for_byte(
    provider: OpenAICompatible, fake: FakeUpstream
) -> None:
    body = {**ASK_RESPONSES, "stream": True}
    recorded = await _raw(fake, "/responses", body)
    fake.inject(_replaying(recorded))
    events = await _events(provider, "responses", body)
    assert all(e[EVENT] == e["type"] for e in events)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert "response.web_search_call.searching" in {e["type"] for e in events}
    for event in events:
        assert_conforms({k: v for k, v in event.items() if k != EVENT}, "ResponseStreamEvent")
    form = NativeEvents("responses")
    written = form.batch(events) + await form.end()
    assert written == recorded  # and no [DONE]: none was sent


async def test_a_completions_stream_is_relayed_byte_for_byte(
    provider: OpenAICompatible, fake: FakeUpstream
) -> None:
    body = {**ASK_COMPLETIONS, "stream": True}
    recorded = await _raw(fake, "/completions", body)
    fake.inject(_replaying(recorded))
    events = await _events(provider, "completions", body)
    assert events and all(EVENT not in e for e in events)
    form = NativeEvents("completions")
    written = form.batch(events) + await form.end()
    assert written == recorded
    assert written.endswith(b"data: [DONE]\n\n")


async def test_usage_of_a_native_stream_reaches_the_record(provider: OpenAICompatible) -> None:
    from gateway.context import RequestContext

    ctx = RequestContext(request_id="r", endpoint="responses")
    stage = NativeUsage(ctx)
    for event in await _events(provider, "responses", {**ASK_RESPONSES, "stream": True}):
        stage.chunks([event])
    assert ctx.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _answer_with(payload: Any) -> Any:
    def fault(received: Received) -> web.StreamResponse:
        return web.json_response(payload)

    return fault


@pytest.mark.parametrize(
    ("endpoint", "payload", "problem"),
    [
        ("responses", [1, 2], "not an object"),
        ("responses", {"id": "r", "output": "text"}, "`output` is not a list of objects"),
        ("completions", {"id": "c"}, "`choices` is not a list of objects"),
        ("completions", {"choices": [1]}, "`choices` is not a list of objects"),
        ("completions", {"id": "c", "choices": []}, "`choices` is not a list of objects"),
        ("completions", {"error": {"message": "overloaded"}}, "200 with an error: overloaded"),
        ("responses", {"error": {"message": "overloaded"}}, "200 with an error: overloaded"),
    ],
)
async def test_a_native_answer_in_another_shape_is_an_upstream_failure(
    provider: OpenAICompatible, fake: FakeUpstream, endpoint: str, payload: Any, problem: str
) -> None:
    fake.inject(_answer_with(payload))
    with pytest.raises(UpstreamError) as info:
        await provider.native(endpoint, {"model": "m"})
    assert info.value.code == "upstream_invalid_response" and problem in info.value.message


@pytest.mark.parametrize("endpoint", ["completions", "responses"])
async def test_a_native_json_answer_of_another_content_type_is_refused(
    provider: OpenAICompatible, endpoint: str
) -> None:
    body = {"model": "m", "prompt": "x", "input": "x", "fake": {"content_type": "text/html"}}
    with pytest.raises(InvalidUpstreamAnswer) as info:
        await provider.native(endpoint, body)
    assert info.value.reason == "content_type"


async def test_a_completions_stream_of_no_choice_is_refused_before_its_first_event(
    provider: OpenAICompatible, fake: FakeUpstream
) -> None:
    fake.inject(_replaying(b'data: {"id": "c", "object": "text_completion"}\n\ndata: [DONE]\n\n'))
    got: list[Json] = []
    with pytest.raises(InvalidUpstreamAnswer) as info:
        async for batch in provider.native_stream("completions", {"model": "m", "stream": True}):
            got += batch
    assert info.value.reason == "empty_stream" and got == []


async def test_a_completions_stream_without_done_is_cut(provider: OpenAICompatible) -> None:
    body = {**ASK_COMPLETIONS, "stream": True, "fake": {"no_done": True}}
    got: list[Json] = []
    with pytest.raises(UpstreamError) as info:
        async for batch in provider.native_stream("completions", body):
            got += batch
    assert info.value.code == "upstream_stream_cut" and got


async def test_a_responses_stream_without_its_terminal_event_is_cut(
    provider: OpenAICompatible,
) -> None:
    body = {**ASK_RESPONSES, "stream": True, "fake": {"cut_after": 4}}
    got: list[Json] = []
    with pytest.raises(GatewayError) as info:
        async for batch in provider.native_stream("responses", body):
            got += batch
    assert info.value.status == 502
    assert [e["type"] for e in got][:2] == ["response.created", "response.in_progress"]


async def test_an_error_event_mid_stream_raises_after_the_events_before(
    provider: OpenAICompatible,
) -> None:
    body = {**ASK_RESPONSES, "stream": True, "fake": {"stream_error_after": 3}}
    got: list[Json] = []
    with pytest.raises(UpstreamError) as info:
        async for batch in provider.native_stream("responses", body):
            got += batch
    assert len(got) == 3 and "mid-stream" in info.value.message


async def test_a_provider_that_is_not_native_refuses() -> None:
    settings = build_settings(
        parse_config("providers: {demo: {type: demo}}\nmodels: [{name: d, provider: demo}]"),
        "<t>",
        {},
    )
    demo = DemoProvider(settings.providers["demo"])
    with pytest.raises(InvalidRequest):
        await demo.native("responses", {})
    with pytest.raises(InvalidRequest):
        await anext(demo.native_stream("completions", {}))


def test_the_demo_provider_cannot_be_declared_native() -> None:
    with pytest.raises(Exception, match="demo provider serves chat completions only"):
        parse_config("providers: {demo: {type: demo, native: [responses]}}\nmodels: []")


def test_named_events_are_read_across_any_split_and_line_end() -> None:
    stream = (
        b'event: response.created\r\ndata: {"a": 1}\r\n\r\n'
        b': a comment\n\nevent: x\ndata: {"b":\ndata: 2}\n\n'
        b'data: [DONE]\n\ndata: {"tail": true}'
    )
    expected = [
        ("response.created", b'{"a": 1}'),
        ("x", b'{"b":\n2}'),
        (None, b"[DONE]"),
        (None, b'{"tail": true}'),
    ]
    rng = random.Random(7)
    for _ in range(200):
        reader, got, rest = NamedEventReader(), [], stream
        while rest:
            cut = rng.randint(1, len(rest))
            got += reader.feed(rest[:cut])
            rest = rest[cut:]
        assert got + reader.end() == expected


async def test_a_failure_after_the_headers_is_written_in_the_endpoints_shape() -> None:
    from gateway.errors import UpstreamError as Broken

    responses = NativeEvents("responses")
    responses.batch([{EVENT: "response.created", "type": "response.created", "sequence_number": 0}])
    event = responses.failed(Broken("provider 'up' reported an error mid-stream"))
    name, data = event.split(b"\n", 1)
    assert name == b"event: error" and data.startswith(b"data: ") and data.endswith(b"\n\n")
    error = json.loads(data[6:])
    assert error["sequence_number"] == 1
    assert_conforms(error, "ResponseStreamEvent")
    assert await responses.end() == b""

    completions = NativeEvents("completions")
    body = json.loads(completions.failed(Broken("cut"))[6:])
    assert set(body) == {"error"} and await completions.end() == b"data: [DONE]\n\n"
