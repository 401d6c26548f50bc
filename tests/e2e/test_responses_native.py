"""Responses with built-in tools (web search...) end to end: relayed to an upstream that
serves /v1/responses itself, through the executor, kept in the tenant's store; refused with
the tool named where no upstream of the model does; level 4 when none answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import assert_conforms, request, upstream_requests

Json = dict[str, Any]
UNAVAILABLE = "Down for a moment, retry soon."
SEARCH = [{"type": "web_search"}]
RESPONSES = "/v1/responses"


def native_config(fake_url: str, dead: str) -> Json:
    """`dead`: the URL of a provider in an outage."""
    return {
        "server": {"access_log": False},
        "providers": {
            "fake": {"type": "openai", "base_url": fake_url},
            "native": {"type": "openai", "base_url": fake_url, "native": ["responses"]},
            "native-dead": {"type": "openai", "base_url": dead, "native": ["responses"]},
        },
        "models": [
            {"name": "chat-only", "provider": "fake"},
            {"name": "searcher", "provider": "native", "upstream_model": "searcher-up"},
            {"name": "searcher-down", "provider": "native-dead"},
        ],
        "responses": {"store": {"type": "memory"}},
        "resilience": {
            "retry": {"attempts": 2, "initial_backoff_ms": 1, "max_backoff_ms": 2},
            "breaker": {"failures": 1000},
        },
        "degradation": {"unavailable": {"mode": "answer", "message": {"en": UNAVAILABLE}}},
    }


@pytest.fixture(scope="module")
def native_server(
    server_thread: ServerThread, fake: FakeUpstream, down: FakeUpstream
) -> Iterator[GatewayServer]:
    with running_gateway(server_thread, settings_of(native_config(fake.url, down.url))) as server:
        yield server


@pytest.fixture
def gw(native_server: GatewayServer, fake_upstream: FakeUpstream) -> GatewayServer:
    return native_server


def client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "k", 20)


def test_a_built_in_tool_goes_to_the_upstream_that_runs_it(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    response = client(gw).responses.create(model="searcher", input="Latest news?", tools=SEARCH)
    assert [item.type for item in response.output] == ["web_search_call", "message"]
    assert_conforms(response.model_dump(exclude_unset=True), "Response")
    sent = upstream_requests(fake_upstream, RESPONSES)[-1]["body"]
    assert sent["model"] == "searcher-up" and sent["tools"] == SEARCH
    assert sent["store"] is False  # the gateway keeps it, not the provider
    assert upstream_requests(fake_upstream) == []  # no chat call


def test_the_native_answer_is_stored_and_continued_with_the_conversation_written_out(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    sdk = client(gw)
    first = sdk.responses.create(model="searcher", input="Latest news?", tools=SEARCH)
    assert sdk.responses.retrieve(first.id).id == first.id
    second = sdk.responses.create(
        model="searcher", input="And sports?", tools=SEARCH, previous_response_id=first.id
    )
    sent = upstream_requests(fake_upstream, RESPONSES)[-1]["body"]
    assert "previous_response_id" not in sent  # the provider does not know the gateway's ids
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": "Latest news?"},
        {"type": "message", "role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And sports?"},
    ]
    items = sdk.responses.input_items.list(second.id)
    assert [item.type for item in items.data] == ["message"]


def test_a_native_stream_is_relayed_as_it_came_and_its_final_response_kept(
    gw: GatewayServer,
) -> None:
    sdk = client(gw)
    with sdk.responses.stream(model="searcher", input="Latest news?", tools=SEARCH) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.web_search_call.completed" in types
    assert types[-1] == "response.completed"
    assert sdk.responses.retrieve(final.id).output_text == final.output_text


async def test_a_native_stream_keeps_event_names_and_sequence_numbers(gw: GatewayServer) -> None:
    body = {"model": "searcher", "input": "Latest news?", "tools": SEARCH, "stream": True}
    resp = await request("POST", gw.url + RESPONSES, body=body)
    assert resp.status == 200
    blocks = [b for b in resp.text.split("\n\n") if b]
    events = []
    for block in blocks:
        name, data = block.split("\n")
        event = orjson.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        assert_conforms(event, "ResponseStreamEvent")
        events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_without_a_native_upstream_a_built_in_tool_is_refused_by_name(
    gw: GatewayServer,
) -> None:
    body = {"model": "chat-only", "input": "Latest news?", "tools": SEARCH}
    resp = await request("POST", gw.url + RESPONSES, body=body)
    assert resp.status == 400
    error = resp.json()["error"]
    assert (error["param"], error["code"]) == ("tools[0].type", "unsupported_tool")
    assert "natively" in error["message"]


def test_level_4_when_no_native_upstream_answers(gw: GatewayServer) -> None:
    response = client(gw).responses.create(model="searcher-down", input="News?", tools=SEARCH)
    assert response.output_text == UNAVAILABLE
    assert_conforms(response.model_dump(exclude_unset=True), "Response")
