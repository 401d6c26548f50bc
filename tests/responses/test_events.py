"""Chat chunks -> the Responses event stream (unit): every event conforms to the official
schema, sequence numbers count from 0, deltas add up to the final items, whatever the
chunking."""

from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import Any

import orjson
import pytest

from gateway.errors import UpstreamError
from gateway.responses import items, output
from gateway.responses import request as translate
from gateway.responses.events import ResponseEvents
from tests.e2e.helpers import assert_conforms

Json = dict[str, Any]
BODY: Json = {"model": "m", "input": "hi"}


def chunk(delta: Json | None = None, finish: str | None = None, **extra: Any) -> Json:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": choices, **extra}  # fmt: skip


def call_delta(index: int, call_id: str | None, name: str, arguments: str) -> Json:
    call: Json = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call.update(id=call_id, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


USAGE = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}


def translated(batches: list[list[Json]], fail: bool = False) -> tuple[list[Json], list[Json]]:
    """The events for these batches, and what on_complete was given."""
    stored: list[Json] = []

    async def keep(response: Json) -> None:
        stored.append(response)

    asked = translate.parse(BODY)
    snapshot = partial(output.response_object, "resp_1", asked, BODY, model="m", created_at=1)
    events = ResponseEvents(
        lambda items, status, usage, finish, error: snapshot(
            output=items, status=status, usage=usage, finish_reason=finish, error=error
        ),
        keep,
    )
    raw = b"".join(events.batch(batch) for batch in batches)
    if fail:
        raw += events.failed(UpstreamError("the upstream broke"))
    raw += asyncio.run(events.end())
    parsed = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            event = orjson.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            parsed.append(event)
    return parsed, stored


def check(events: list[Json]) -> None:
    for event in events:
        assert_conforms(event, "ResponseStreamEvent")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]


def final_items(events: list[Json]) -> list[Json]:
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    last = events[-1]
    assert last["type"] in ("response.completed", "response.incomplete")
    assert last["response"]["output"] == done
    return done


def texts_from_deltas(events: list[Json]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for e in events:
        if e["type"] == "response.output_text.delta":
            texts[e["item_id"]] = texts.get(e["item_id"], "") + e["delta"]
    return texts


def test_a_text_stream_is_the_official_sequence() -> None:
    events, stored = translated(
        [
            [chunk({"role": "assistant", "content": ""})],
            [chunk({"content": "Hello"}), chunk({"content": " world"})],
            [chunk({}, "stop"), chunk(None, usage=USAGE)],
        ]
    )
    check(events)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    (item,) = final_items(events)
    assert item["content"][0]["text"] == "Hello world"
    assert events[-1]["response"]["usage"]["output_tokens"] == 4
    assert stored == [events[-1]["response"]]


def test_text_then_calls_each_item_in_turn() -> None:
    events, _ = translated(
        [
            [chunk({"content": "Checking."})],
            [chunk(call_delta(0, "call_a", "get_weather", '{"city":'))],
            [chunk(call_delta(0, None, "", '"Paris"}'))],
            [chunk(call_delta(1, "call_b", "get_time", "{}")), chunk({}, "tool_calls")],
        ]
    )
    check(events)
    message, first, second = final_items(events)
    assert message["content"][0]["text"] == "Checking."
    assert (first["call_id"], first["name"], first["arguments"]) == (
        "call_a",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert (second["call_id"], second["name"]) == ("call_b", "get_time")
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in done] == ['{"city":"Paris"}', "{}"]


def test_a_cut_answer_ends_incomplete() -> None:
    events, _ = translated([[chunk({"content": "Once"})], [chunk({}, "length")]])
    check(events)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_an_empty_stream_still_completes_with_one_empty_message() -> None:
    events, _ = translated([[chunk({}, "stop")]])
    check(events)
    (item,) = final_items(events)
    assert item["content"] == [items.text_part("")]


def test_a_refusal_streams_as_refusal_events() -> None:
    events, _ = translated([[chunk({"refusal": "I can't"})], [chunk({"refusal": " help."})]])
    check(events)
    (item,) = final_items(events)
    assert item["content"] == [{"type": "refusal", "refusal": "I can't help."}]
    assert "response.refusal.done" in [e["type"] for e in events]


def test_a_failure_mid_stream_is_an_error_event_then_response_failed_and_nothing_kept() -> None:
    events, stored = translated([[chunk({"content": "Hel"})]], fail=True)
    check(events)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["output"][0]["status"] == "incomplete"
    assert stored == []


def test_a_failure_before_any_chunk_still_opens_the_stream() -> None:
    events, _ = translated([], fail=True)
    check(events)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]


@pytest.mark.parametrize("seed", range(40))
def test_any_chunking_gives_the_same_items(seed: int) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choice(["alpha", "beta", "γάμμα", "δ", "🙂", "x\ny"]) for _ in range(30))
    arguments = orjson.dumps({"city": "Paris", "n": rng.randint(0, 999)}).decode()
    deltas: list[Json] = []
    cuts = sorted(rng.sample(range(1, len(text)), 6))
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        deltas.append(chunk({"content": text[start:end]}))
    call_cuts = sorted(rng.sample(range(1, len(arguments)), 3))
    pieces = [arguments[a:b] for a, b in zip([0, *call_cuts], [*call_cuts, None], strict=True)]
    deltas.append(chunk(call_delta(0, "call_x", "get_weather", pieces[0])))
    deltas += [chunk(call_delta(0, None, "", piece)) for piece in pieces[1:]]
    deltas += [chunk({}, "tool_calls"), chunk(None, usage=USAGE)]
    batches: list[list[Json]] = []
    while deltas:
        take = rng.randint(0, 3)
        batches.append(deltas[:take])
        deltas = deltas[take:]
    events, _ = translated(batches)
    check(events)
    message, call = final_items(events)
    assert texts_from_deltas(events) == {message["id"]: text}
    assert message["content"][0]["text"] == text
    assert call["arguments"] == arguments


def test_reasoning_content_streams_as_a_reasoning_item_before_the_message() -> None:
    events, _ = translated(
        [
            [chunk({"reasoning_content": "The user greets"}), chunk({"reasoning_content": "."})],
            [chunk({"content": "Hi!"}), chunk({}, "stop")],
        ]
    )
    check(events)
    reasoning, message = final_items(events)
    assert reasoning["type"] == "reasoning"
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user greets."}]
    assert message["content"][0]["text"] == "Hi!"
    assert "response.reasoning_text.done" in [e["type"] for e in events]


def test_a_calls_name_is_in_its_output_item_added() -> None:
    events, _ = translated([[chunk(call_delta(0, "call_a", "get_weather", '{"city":"Rome"}'))]])
    check(events)
    (added,) = [e for e in events if e["type"] == "response.output_item.added"]
    assert (added["item"]["name"], added["item"]["arguments"]) == ("get_weather", "")
