"""`/v1/responses` end to end: the real OpenAI SDK (sync and async) and raw HTTP against the
gateway on a socket, the fake upstream (a chat completions server) behind it.

Every Response, item list and stream event the gateway sends is validated against the official
schemas (tests/data/openai/openapi-subset.json); streams are read from the raw bytes too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from gateway.http.keys import CACHE as CACHE_KEY
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import (
    RawResponse,
    assert_conforms,
    assert_raw_error,
    parse_sse,
    request,
    sse_json,
    stream_text,
    upstream_requests,
)
from tests.e2e.responses_client import (
    Responses,
    function_calls,
    output_text,
    parse_events,
)
from tests.e2e.sdk import Sdk

Json = dict[str, Any]
MODEL = "fake-model"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
TRANSFER = {
    "type": "function",
    "name": "transfer",
    "parameters": {
        "type": "object",
        "properties": {
            "amount": {"type": "number", "minimum": 0},
            "to": {"type": "string"},
            "currency": {"type": "string", "enum": ["EUR", "USD"]},
        },
        "required": ["amount", "to"],
        "additionalProperties": False,
    },
}
GOOD = {"name": "transfer", "arguments": {"amount": 10, "to": "Bob", "currency": "EUR"}}
HALLUCINATED = {"name": "transfer_money", "arguments": {"amount": 10, "to": "Bob"}}
BAD_ARGS = {"name": "transfer", "arguments": {"amount": "lots", "to": "Bob", "currency": "GBP"}}
UNAVAILABLE = "The assistant is resting, ask again in a minute."


def scripted(*replies: Json) -> Json:
    """extra_body that makes the fake upstream answer each assistant turn in turn."""
    return {"fake": {"replies": list(replies)}}


async def post(gw: GatewayServer, body: Json, key: str | None = None) -> RawResponse:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return await request("POST", gw.url + "/v1/responses", body=body, headers=headers)


def stream_events(resp: RawResponse) -> list[Json]:
    """The events of a streamed answer, each checked against the official schema."""
    assert resp.status == 200, resp.text[:300]
    assert resp.content_type.startswith("text/event-stream"), resp.content_type
    events = parse_events(resp.body)
    for event in events:
        assert_conforms(event, "ResponseStreamEvent")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def completed(events: list[Json]) -> Json:
    assert events[-1]["type"] == "response.completed", [e["type"] for e in events]
    response: Json = events[-1]["response"]
    assert_conforms(response, "Response")
    assert response["status"] == "completed"
    return response


# --- create, plain and streamed ---------------------------------------------------------------


def test_a_string_input_gets_a_valid_response(sdk: Sdk, fake_upstream: FakeUpstream) -> None:
    body, headers = Responses(sdk).create_raw(model=MODEL, input="What is the capital of France?")
    assert_conforms(body, "Response")
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["id"].startswith("resp_") and body["model"] == MODEL
    assert output_text(body) == "Echo: What is the capital of France?"
    assert body["usage"]["input_tokens"] == 10 and body["usage"]["output_tokens"] == 5
    assert body["usage"]["total_tokens"] == 15
    assert headers["content-type"].startswith("application/json")
    sent = upstream_requests(fake_upstream)[-1]["body"]
    assert sent["messages"] == [{"role": "user", "content": "What is the capital of France?"}]


def test_the_sdk_reads_output_text_and_usage(sdk: Sdk, gw: GatewayServer) -> None:
    response = Responses(sdk).create(
        model=MODEL,
        instructions="Answer briefly.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
        max_output_tokens=50,
        temperature=0.2,
        metadata={"ticket": "42"},
    )
    assert response.output_text == "Echo: Hello"
    assert response.usage is not None and response.usage.total_tokens == 15
    assert response.instructions == "Answer briefly." and response.metadata == {"ticket": "42"}
    assert response.max_output_tokens == 50 and response.temperature == 0.2


def test_request_fields_are_translated_to_the_chat_body(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    sdk_client(gw.url).responses.create(
        model=MODEL,
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "Use metric units."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is in this picture?"},
                    {"type": "input_image", "image_url": "https://example.com/cat.png"},
                ],
            },
        ],
        tools=[WEATHER],
        tool_choice="auto",
        parallel_tool_calls=False,
        max_output_tokens=64,
        top_p=0.5,
        user="user-7",
        text={"format": {"type": "json_object"}},
    )
    sent = upstream_requests(fake_upstream)[-1]["body"]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use metric units."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        },
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters", "strict")},
        }
    ]
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False
    assert sent["max_completion_tokens"] == 64 and sent["top_p"] == 0.5
    assert sent["user"] == "user-7"
    assert sent["response_format"] == {"type": "json_object"}


async def test_a_stream_is_the_official_event_sequence(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    question = "one two three four five"
    events = stream_events(await post(gw, {"model": MODEL, "input": question, "stream": True}))
    types = [e["type"] for e in events]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1, "the fake sends a word per chunk"
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in deltas)
    assert text == f"Echo: {question}"
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["text"] == text
    response = completed(events)
    assert output_text(response) == text
    item_done = next(e for e in events if e["type"] == "response.output_item.done")["item"]
    assert response["output"] == [item_done]
    ids = {events[0]["response"]["id"], events[1]["response"]["id"], response["id"]}
    assert len(ids) == 1, "one response id throughout"
    assert {e["item_id"] for e in deltas} == {item_done["id"]}
    assert response["usage"]["output_tokens"] == 5
    sent = upstream_requests(fake_upstream)[-1]["body"]
    assert sent["stream"] is True


async def test_a_streamed_function_call_adds_up_to_its_arguments(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    body = {
        "model": MODEL,
        "input": "Weather in Paris?",
        "tools": [WEATHER],
        "stream": True,
        **scripted({"tool_calls": [call]}),
    }
    events = stream_events(await post(gw, body))
    added = next(e for e in events if e["type"] == "response.output_item.added")["item"]
    assert added["type"] == "function_call" and added["name"] == "get_weather"
    assert added["arguments"] == "", "clients append the deltas to the added item's arguments"
    deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert json.loads(deltas) == {"city": "Paris"}
    args_done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert args_done["arguments"] == deltas
    response = completed(events)
    [item] = function_calls(response)
    assert item["arguments"] == deltas and item["call_id"] == added["call_id"]


@pytest.mark.parametrize("fault", ["cut_after", "stream_error_after"])
async def test_a_stream_that_breaks_ends_with_error_and_response_failed(
    gw: GatewayServer, fake_upstream: FakeUpstream, fault: str
) -> None:
    body = {
        "model": MODEL,
        "input": "one two three four five six",
        "stream": True,
        "fake": {fault: 3},
    }
    events = stream_events(await post(gw, body))
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-2:] == ["error", "response.failed"], types
    failed = events[-1]["response"]
    assert_conforms(failed, "Response")
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert all(item["status"] != "in_progress" for item in failed["output"])
    assert events[-2]["message"]


def test_the_sdk_streams_and_its_stream_helper_accepts_the_events(sdk: Sdk, gw: GatewayServer):
    responses = Responses(sdk)
    events = responses.stream(model=MODEL, input="stream this please")
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Echo: stream this please"
    # The helper rebuilds the response and raises on any inconsistency between the events.
    final = responses.stream_helper(model=MODEL, input="stream this please")
    assert final.output_text == text and final.status == "completed"


# --- structured output, tools -------------------------------------------------------------------


class City(BaseModel):
    name: str
    population: int


def test_parse_with_a_pydantic_model(sdk: Sdk, fake_upstream: FakeUpstream) -> None:
    answer = json.dumps({"name": "Paris", "population": 2100000})
    parsed = Responses(sdk).parse(
        model=MODEL,
        input="The largest city of France?",
        text_format=City,
        extra_body=scripted({"content": answer}),
    )
    assert parsed.output_parsed == City(name="Paris", population=2100000)
    sent = upstream_requests(fake_upstream)[-1]["body"]
    assert sent["response_format"]["type"] == "json_schema"
    schema = sent["response_format"]["json_schema"]
    assert schema["name"] == "City" and schema["strict"] is True
    assert schema["schema"]["required"] == ["name", "population"]


def test_a_function_tool_round_trip(sdk: Sdk, fake_upstream: FakeUpstream) -> None:
    responses = Responses(sdk)
    script = scripted(
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        {"content": "It is sunny in Paris."},
    )
    question = {"role": "user", "content": "Weather in Paris?"}
    first = responses.create(model=MODEL, input=[question], tools=[WEATHER], extra_body=script)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24C"}
    final = responses.create(
        model=MODEL,
        input=[question, call.model_dump(exclude_none=True), result],
        tools=[WEATHER],
        extra_body=script,
    )
    assert final.output_text == "It is sunny in Paris."
    sent = upstream_requests(fake_upstream)[-1]["body"]["messages"]
    assert sent[0] == {"role": "user", "content": "Weather in Paris?"}
    assert sent[1]["role"] == "assistant"
    assert sent[1]["tool_calls"][0]["id"] == call.call_id
    assert sent[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sent[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 24C"}


# --- stored responses ---------------------------------------------------------------------------


def test_previous_response_id_continues_the_conversation(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    client = sdk_client(gw.url)
    first = client.responses.create(model=MODEL, instructions="Be nice.", input="I am Ann.")
    second = client.responses.create(model=MODEL, input="Who am I?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    third = client.responses.create(
        model=MODEL, instructions="Be brief.", input="Sure?", previous_response_id=second.id
    )
    assert third.output_text == "Echo: Sure?"
    *_, sent = upstream_requests(fake_upstream)
    assert sent["body"]["messages"] == [
        {"role": "system", "content": "Be brief."},  # instructions are not carried over
        {"role": "user", "content": "I am Ann."},
        {"role": "assistant", "content": "Echo: I am Ann."},
        {"role": "user", "content": "Who am I?"},
        {"role": "assistant", "content": "Echo: Who am I?"},
        {"role": "user", "content": "Sure?"},
    ]


async def test_retrieve_input_items_and_delete(gw: GatewayServer) -> None:
    input_ = [
        {"role": "user", "content": "First question"},
        {"role": "user", "content": [{"type": "input_text", "text": "Second part"}]},
    ]
    created = await post(gw, {"model": MODEL, "input": input_})
    response = created.json()
    url = f"{gw.url}/v1/responses/{response['id']}"

    got = await request("GET", url)
    assert got.status == 200 and got.json() == response
    assert_conforms(got.json(), "Response")

    items = await request("GET", url + "/input_items")
    assert items.status == 200
    listing = items.json()
    assert_conforms(listing, "ResponseItemList")
    texts = [item["content"][0]["text"] for item in listing["data"]]
    assert texts == ["Second part", "First question"], "newest first by default"
    ascending = (await request("GET", url + "/input_items?order=asc&limit=1")).json()
    assert_conforms(ascending, "ResponseItemList")
    assert [i["content"][0]["text"] for i in ascending["data"]] == ["First question"]
    assert ascending["has_more"] is True

    deleted = await request("DELETE", url)
    assert deleted.status == 200
    assert deleted.json() == {"id": response["id"], "object": "response", "deleted": True}
    for method, path in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
        assert_raw_error(await request(method, url + path), 404, code="not_found")


def test_the_sdk_retrieves_lists_and_deletes(sdk: Sdk, gw: GatewayServer) -> None:
    responses = Responses(sdk)
    created = responses.create(model=MODEL, input="Keep this")
    assert responses.retrieve(created.id).output_text == "Echo: Keep this"
    [item] = responses.input_items(created.id)
    assert item.type == "message" and item.content[0].text == "Keep this"
    responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        responses.retrieve(created.id)


async def test_store_false_is_not_kept(gw: GatewayServer) -> None:
    response = (await post(gw, {"model": MODEL, "input": "Forget me", "store": False})).json()
    assert_conforms(response, "Response")
    assert response["store"] is False
    got = await request("GET", f"{gw.url}/v1/responses/{response['id']}")
    assert_raw_error(got, 404, code="not_found", param="response_id")
    continued = await post(
        gw, {"model": MODEL, "input": "and?", "previous_response_id": response["id"]}
    )
    assert_raw_error(continued, 404, code="previous_response_not_found")


async def test_unknown_ids_are_openai_404s(gw: GatewayServer) -> None:
    url = f"{gw.url}/v1/responses/resp_{'0' * 48}"
    error = assert_raw_error(await request("GET", url), 404, code="not_found", param="response_id")
    assert "not found" in error["message"]
    assert_raw_error(await request("GET", url + "/input_items"), 404, code="not_found")
    assert_raw_error(await request("DELETE", url), 404, code="not_found")
    continued = await post(
        gw, {"model": MODEL, "input": "hi", "previous_response_id": "resp_never_was"}
    )
    assert_raw_error(
        continued, 404, code="previous_response_not_found", param="previous_response_id"
    )


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {"input": [{"type": "item_reference", "id": "msg_1"}]},
            "input[0].type",
            "unsupported_item_type",
        ),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_tool"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_video", "url": "x"}]}]},
            "input[0].content[0].type",
            "unsupported_content_type",
        ),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", None),
        ({"input": "hi", "background": True}, "background", "unsupported_parameter"),
        ({}, "input", None),
        ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format", None),
    ],
    ids=[
        "unknown-item-type",
        "built-in-tool",
        "unknown-part",
        "unknown-role",
        "background",
        "no-input",
        "bad-format",
    ],
)
async def test_what_cannot_be_translated_is_a_400_naming_the_field(
    gw: GatewayServer, fake_upstream: FakeUpstream, body: Json, param: str, code: str | None
) -> None:
    resp = await post(gw, {"model": MODEL, **body})
    error = assert_raw_error(resp, 400, param=param, **({"code": code} if code else {}))
    assert error["type"] == "invalid_request_error"
    assert upstream_requests(fake_upstream) == [], "refused before any upstream call"


async def test_a_built_in_tool_is_refused_with_a_clear_message(gw: GatewayServer) -> None:
    for tool in ("web_search", "file_search", "computer_use_preview"):
        resp = await post(gw, {"model": MODEL, "input": "news?", "tools": [{"type": tool}]})
        error = assert_raw_error(resp, 400, code="unsupported_tool")
        assert tool in error["message"] and "function tools" in error["message"]


# --- tenants ------------------------------------------------------------------------------------

KEY_A, KEY_B = "sk-responses-team-a-0001", "sk-responses-team-b-0002"


@pytest.fixture(scope="module")
def two_tenants(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    keys = [
        {"env": "RESPONSES_KEY_A", "tenant": "team-a"},
        {"env": "RESPONSES_KEY_B", "tenant": "team-b"},
    ]
    environ = {"RESPONSES_KEY_A": KEY_A, "RESPONSES_KEY_B": KEY_B}
    settings = settings_for(fake.url, {"auth": {"keys": keys}}, environ)
    with running_gateway(server_thread, settings) as server:
        yield server


def _never_existed(like: str) -> str:
    """An id of the same form as `like` that no tenant has."""
    return "resp_" + os.urandom((len(like) - len("resp_")) // 2).hex()


async def test_another_tenant_cannot_read_delete_list_or_continue_a_response(
    two_tenants: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    gw = two_tenants
    mine = (await post(gw, {"model": MODEL, "input": "team A secret"}, KEY_A)).json()
    ghost = _never_existed(mine["id"])
    auth_b = {"Authorization": f"Bearer {KEY_B}"}

    async def as_b(method: str, response_id: str, path: str = "") -> RawResponse:
        url = f"{gw.url}/v1/responses/{response_id}{path}"
        return await request(method, url, headers=auth_b)

    async def continue_as_b(response_id: str) -> RawResponse:
        return await post(
            gw, {"model": MODEL, "input": "and?", "previous_response_id": response_id}, KEY_B
        )

    for method, path in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
        theirs, nobodys = await as_b(method, mine["id"], path), await as_b(method, ghost, path)
        assert_raw_error(theirs, 404, code="not_found")
        assert theirs.body == nobodys.body.replace(ghost.encode(), mine["id"].encode()), (
            "another tenant's id must read exactly as one that never existed"
        )
        assert theirs.content_type == nobodys.content_type
    theirs, nobodys = await continue_as_b(mine["id"]), await continue_as_b(ghost)
    assert_raw_error(theirs, 404, code="previous_response_not_found")
    assert theirs.body == nobodys.body.replace(ghost.encode(), mine["id"].encode())
    assert all("team A secret" not in str(r["body"]) for r in upstream_requests(fake_upstream)[1:])

    still = await request(
        "GET", f"{gw.url}/v1/responses/{mine['id']}", headers={"Authorization": f"Bearer {KEY_A}"}
    )
    assert still.status == 200 and still.json() == mine, "B's delete removed nothing"


# --- the pipeline's capabilities through /v1/responses --------------------------------------------


@pytest.fixture(scope="module")
def cached_gateway(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    cache = {
        "store": {"type": "memory"},
        "embedder": {"type": "hash"},
        "defaults": {"enabled": True},
    }
    with running_gateway(server_thread, settings_for(fake.url, {"cache": cache})) as server:
        yield server


@pytest.fixture
def cgw(
    cached_gateway: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> GatewayServer:
    server_thread.call(cached_gateway.fresh_state())
    return cached_gateway


def _settle(gw: GatewayServer, server_thread: ServerThread) -> None:
    cache = gw.app[CACHE_KEY]
    assert cache is not None
    server_thread.call(cache.flush())


def test_the_same_question_twice_is_a_cache_hit(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    raw = sdk_client(cgw.url).responses.with_raw_response
    question = "How many moons does Mars have?"
    first = raw.create(model=MODEL, input=question)
    assert first.headers["x-gateway-cache"] == "miss"
    _settle(cgw, server_thread)
    second = raw.create(model=MODEL, input=question)
    assert second.headers["x-gateway-cache"].startswith("hit")
    assert_conforms(json.loads(second.text), "Response")
    assert second.parse().output_text == first.parse().output_text
    assert second.parse().id != first.parse().id, "a hit is a response of its own"
    assert len(upstream_requests(fake_upstream)) == 1


def test_chat_completions_and_responses_share_cache_entries(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = sdk_client(cgw.url)
    question = "What is the boiling point of water at sea level?"
    chat = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": question}]
    )
    assert chat.headers["x-gateway-cache"] == "miss"
    _settle(cgw, server_thread)
    raw = client.responses.with_raw_response.create(model=MODEL, input=question)
    assert raw.headers["x-gateway-cache"].startswith("hit")
    assert raw.parse().output_text == chat.parse().choices[0].message.content
    assert len(upstream_requests(fake_upstream)) == 1
    # and the other way round, streamed
    other = "Which planet is the largest?"
    client.responses.create(model=MODEL, input=other)
    _settle(cgw, server_thread)
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[{"role": "user", "content": other}], stream=True
    ) as streamed:
        assert streamed.headers["x-gateway-cache"].startswith("hit")
        chunks, done = sse_json(parse_sse(streamed.read()))
        assert done and stream_text(chunks) == f"Echo: {other}"
    assert len(upstream_requests(fake_upstream)) == 2


def _guarded(gw: GatewayServer, replies: list[Json], streamed: bool) -> Json:
    body = {
        "model": MODEL,
        "input": "Send Bob 10 euros.",
        "tools": [TRANSFER],
        **scripted(*replies),
    }
    if not streamed:
        response = sdk_client(gw.url).responses.with_raw_response.create(
            model=MODEL, input=body["input"], tools=body["tools"], extra_body=scripted(*replies)
        )
        answer: Json = json.loads(response.text)
        assert_conforms(answer, "Response")
        return answer
    import asyncio

    return completed(stream_events(asyncio.run(post(gw, {**body, "stream": True}))))


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("bad", [HALLUCINATED, BAD_ARGS], ids=["hallucinated", "bad-arguments"])
def test_an_invalid_function_call_is_repaired(
    gw: GatewayServer, fake_upstream: FakeUpstream, streamed: bool, bad: Json
) -> None:
    response = _guarded(gw, [{"tool_calls": [bad]}, {"tool_calls": [GOOD]}], streamed)
    [call] = function_calls(response)
    assert call["name"] == "transfer" and json.loads(call["arguments"]) == GOOD["arguments"]
    _, repair = upstream_requests(fake_upstream)
    feedback = repair["body"]["messages"][-1]
    assert feedback["role"] == "tool"
    assert ("transfer_money" if bad is HALLUCINATED else "GBP") in feedback["content"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_call_the_model_will_not_fix_is_stripped(
    gw: GatewayServer, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    response = _guarded(gw, [{"tool_calls": [HALLUCINATED]}], streamed)
    assert function_calls(response) == [], "the client never sees an undeclared tool"
    assert "valid tool call" in output_text(response)
    assert len(upstream_requests(fake_upstream)) == 3, "the answer and two repair attempts"


@pytest.fixture(scope="module")
def down_gateway(server_thread: ServerThread, down: FakeUpstream) -> Iterator[GatewayServer]:
    """Level 4 answers on: the only provider is in an outage."""
    degradation = {"unavailable": {"mode": "answer", "message": {"en": UNAVAILABLE}}}
    settings = settings_for(down.url, {"degradation": degradation})
    with running_gateway(server_thread, settings) as server:
        yield server


async def test_level_4_is_a_well_formed_response(down_gateway: GatewayServer) -> None:
    resp = await post(down_gateway, {"model": MODEL, "input": "Are you there?"})
    assert resp.status == 200, resp.text[:300]
    assert resp.headers["x-gateway-degraded"] == "unavailable"
    assert resp.headers["x-gateway-level"] == "4"
    response = resp.json()
    assert_conforms(response, "Response")
    assert response["status"] == "completed", "clients (the Agents SDK) raise on failed ones"
    assert output_text(response) == UNAVAILABLE

    streamed = await post(down_gateway, {"model": MODEL, "input": "Hello?", "stream": True})
    assert streamed.headers["x-gateway-degraded"] == "unavailable"
    events = stream_events(streamed)
    assert output_text(completed(events)) == UNAVAILABLE
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == UNAVAILABLE


async def test_metrics_count_responses_under_their_own_endpoint(gw: GatewayServer) -> None:
    await post(gw, {"model": MODEL, "input": "count me"})
    await post(gw, {"model": MODEL, "input": "count me too", "stream": True})
    metrics = (await request("GET", gw.url + "/metrics")).text
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("gateway_requests_total{") and 'endpoint="responses"' in line
    ]
    assert any(f'model="{MODEL}"' in line and 'status_class="2xx"' in line for line in counted)
    assert 'gateway_request_duration_seconds_count{endpoint="responses"' in metrics


def test_cancel_says_a_stored_response_is_already_complete(gw: GatewayServer) -> None:
    """The SDK's responses.cancel: only background responses can be, and the gateway runs
    none; an unknown id is the same 404 as for retrieve."""
    client = sdk_client(gw.url)
    created = client.responses.create(model=MODEL, input="cancel me?")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.cancel(created.id)
    assert refused.value.code == "not_cancellable"
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_" + "0" * 48)
