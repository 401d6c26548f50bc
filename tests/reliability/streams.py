"""The contract of the Responses API's and legacy completions' answers, for rawhttp.check_reply:
a Responses event stream event by event, a stream of text completion chunks, and the answers
of the stored-response routes.

A Responses stream has `event: <type>` and `data:` lines and no `[DONE]`; every event is a
`ResponseStreamEvent`, numbered 0, 1, 2...; it opens with `response.created` and ends with
exactly one of `response.completed`, `response.incomplete` or `response.failed`, a failure
announced by an `error` event just before it. Completion chunks are `CreateCompletionResponse`
objects whose `finish_reason` may be null before the last (the real API streams null; the
published schema has no null: tests/data/openai README), at most one error event, then [DONE].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.e2e.helpers import assert_conforms, completion_chunk_validator
from tests.e2e.responses_client import parse_events

Json = dict[str, Any]
Conforms = Callable[[Any, str], None]  # (instance, schema name): raises AssertionError
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
TERMINAL_STATUS = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}


def check_response_stream(body: bytes, conforms: Conforms = assert_conforms) -> list[Json]:
    """The events of a Responses stream, checked (see the module docstring)."""
    try:
        events = parse_events(body)
    except (AssertionError, ValueError) as exc:
        raise AssertionError(f"bad Responses stream framing: {exc}") from None
    assert events, "an empty Responses stream"
    for i, event in enumerate(events):
        try:
            conforms(event, "ResponseStreamEvent")
        except AssertionError as exc:
            raise AssertionError(f"event {i} ({event.get('type')}): {exc}") from None
        if event["type"] == "error":
            assert event.get("code") != "internal_error", f"an internal error mid-stream: {event}"
    numbers = [event.get("sequence_number") for event in events]
    assert numbers == list(range(len(events))), f"sequence numbers {numbers}"
    kinds = [event["type"] for event in events]
    assert kinds[0] == "response.created", f"the stream opens with {kinds[0]}"
    terminals = [i for i, kind in enumerate(kinds) if kind in TERMINAL]
    assert terminals == [len(kinds) - 1], f"terminal events at {terminals} of {len(kinds)}: {kinds}"
    last = events[-1]
    assert last["response"]["status"] == TERMINAL_STATUS[last["type"]], last
    errors = [i for i, kind in enumerate(kinds) if kind == "error"]
    if last["type"] == "response.failed":
        assert errors == [len(kinds) - 2], f"a failure's error event at {errors}: {kinds}"
    else:
        assert not errors, f"an error event in a stream that did not fail: {kinds}"
    ids = {e["response"]["id"] for e in events if isinstance(e.get("response"), dict)}
    assert len(ids) == 1, f"one stream, several response ids: {ids}"
    _deltas_add_up(events)
    return events


_DONE_FIELD = {
    "response.output_text.done": ("response.output_text.delta", "text"),
    "response.refusal.done": ("response.refusal.delta", "refusal"),
    "response.reasoning_text.done": ("response.reasoning_text.delta", "text"),
    "response.function_call_arguments.done": (
        "response.function_call_arguments.delta",
        "arguments",
    ),
}


def _deltas_add_up(events: list[Json]) -> None:
    """Each part's deltas add up to its done event's text (a call's to its arguments), and a
    finished stream's items are the final Response's output."""
    for i, event in enumerate(events):
        if event["type"] not in _DONE_FIELD:
            continue
        delta_type, field = _DONE_FIELD[event["type"]]
        where = (event.get("item_id"), event.get("content_index"))
        joined = "".join(
            e["delta"]
            for e in events[:i]
            if e["type"] == delta_type and (e.get("item_id"), e.get("content_index")) == where
        )
        assert joined == event[field], f"deltas {joined!r} but {event['type']} {event[field]!r}"
    last = events[-1]
    if last["type"] == "response.failed":
        return
    done = {
        e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"
    }
    output = last["response"].get("output")
    if not isinstance(output, list):
        return  # a provider's Response of the wrong shape (relayed: the schema check counts it)
    assert done == dict(enumerate(output)), f"items done {done} but output {output}"


def completion_chunk_conforms(chunk: Any, _schema: str) -> None:
    errors = list(completion_chunk_validator().iter_errors(chunk))
    assert not errors, f"a completion chunk: {errors[0].message} at {list(errors[0].path)}"


def check_stored_answer(data: Any, method: bytes, path: bytes, conforms: Conforms) -> None:
    """A 200 of GET /v1/responses/{id} (a Response), of its input_items (a ResponseItemList)
    or of DELETE (exactly the deleted marker OpenAI answers)."""
    route = path.split(b"?", 1)[0]
    if method.upper() == b"DELETE":
        assert isinstance(data, dict) and set(data) == {"id", "object", "deleted"}, data
        assert data["object"] == "response" and data["deleted"] is True, data
        assert isinstance(data["id"], str) and data["id"], data
    elif route.endswith(b"/input_items"):
        conforms(data, "ResponseItemList")
    else:
        conforms(data, "Response")
