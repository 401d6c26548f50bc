"""What makes an upstream 200 an invalid answer (gateway/upstream/shapes.py), and what must
still pass: every field a real provider sends beside the ones the gateway reads."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.upstream import shapes

Json = dict[str, Any]
MESSAGE = {"role": "assistant", "content": "hi", "refusal": None}
TOOL_MESSAGE = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}


def completion(*choices: Json, **more: Any) -> Json:
    return {"id": "x", "object": "chat.completion", "choices": list(choices), **more}


def chunk(*choices: Json, **more: Any) -> Json:
    return {"id": "x", "object": "chat.completion.chunk", "choices": list(choices), **more}


@pytest.mark.parametrize(
    "answer",
    [
        completion({"index": 0, "message": MESSAGE, "finish_reason": "stop"}),
        completion({"index": 0, "message": TOOL_MESSAGE, "finish_reason": "tool_calls"}),
        completion({"message": {"role": "assistant", "content": None, "refusal": "I can't."}}),
        completion({"message": MESSAGE, "x_score": 1}, x_provider={"a": [1]}, usage=None),
    ],
    ids=["text", "null-content-with-tool-calls", "refusal", "unknown-fields"],
)
def test_valid_completions_pass(answer: Json) -> None:
    assert shapes.completion_problem(answer) is None
    assert not shapes.is_error_object(answer)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"id": "x"}, "choices"),
        (completion(), "choices"),
        ({"choices": {"message": MESSAGE}}, "choices"),
        ({"choices": ["hi"]}, "choices"),
        (completion({"index": 0, "finish_reason": "stop"}), "message"),
        (completion({"message": "hi"}), "message"),
        (completion({"message": {"content": ["hi"]}}), "message"),
        (completion({"message": {"tool_calls": {"id": "c"}}}), "message"),
    ],
    ids=[
        "missing",
        "empty",
        "not-a-list",
        "not-objects",
        "no-message",
        "message-text",
        "content-a-list",
        "tool-calls-an-object",
    ],
)
def test_completions_that_only_look_valid(answer: Json, reason: str) -> None:
    problem = shapes.completion_problem(answer)
    assert problem is not None and problem.reason == reason


def test_an_error_body_is_not_an_answer() -> None:
    assert shapes.is_error_object({"error": {"message": "overloaded"}})
    assert not shapes.is_error_object(completion({"message": MESSAGE}, error=None))


@pytest.mark.parametrize(
    "event",
    [
        chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}),
        chunk({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}),
        chunk({"index": 0, "delta": {}, "finish_reason": "stop"}),
        chunk(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
        {"id": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        {"id": "", "object": "", "choices": [], "prompt_filter_results": [{"prompt_index": 0}]},
        chunk({"index": 0, "finish_reason": None, "content_filter_results": {}}),
        {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
    ],
    ids=[
        "first",
        "tool-call",
        "last",
        "usage",
        "usage-without-choices",
        "azure-prompt-filter",
        "azure-content-filter",
        "no-object",
    ],
)
def test_valid_chunks_pass(event: Json) -> None:
    assert shapes.chunk_problem(event) is None


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"id": "x", "object": "chat.completion.chunk"}, "chunk"),
        ({"id": "x", "usage": None}, "chunk"),
        (chunk(), None),  # empty choices: the stream as a whole must have one (empty_stream)
        ({"choices": {"delta": {}}}, "chunk"),
        (completion({"index": 0, "message": MESSAGE}), "chunk"),
        (chunk({"index": 0, "finish_reason": None}), "delta"),
        (chunk({"index": 0, "delta": "hi"}), "delta"),
        (chunk({"index": 0, "delta": {"content": ["hi"]}}), "delta"),
        ({**chunk({"index": 0, "delta": {}}), "object": []}, "chunk"),
    ],
    ids=[
        "no-choices",
        "null-usage-no-choices",
        "empty-choices",
        "choices-not-a-list",
        "a-completion",
        "no-delta",
        "delta-text",
        "content-a-list",
        "object-a-list",
    ],
)
def test_chunks_that_only_look_valid(event: Json, reason: str | None) -> None:
    problem = shapes.chunk_problem(event)
    assert (problem and problem.reason) == reason


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/vnd.provider+json", True),
        ("text/html", False),
        ("text/plain; charset=utf-8", False),
        ("", False),
        ("application/octet-stream", False),
        ("text/event-stream", False),
    ],
)
def test_only_json_media_types_are_plain_answers(content_type: str, json: bool) -> None:
    assert shapes.is_json_type(content_type) is json


def test_embeddings_and_native_lists() -> None:
    vector = {"object": "embedding", "index": 0, "embedding": [0.1]}
    assert shapes.embeddings_problem({"data": [vector]}) is None
    assert shapes.embeddings_problem({"data": [{**vector, "embedding": "AAAA"}]}) is None
    for bad in ({"data": []}, {"data": {}}, {"data": [{"index": 0}]}, {}):
        problem = shapes.embeddings_problem(bad)
        assert problem is not None and problem.reason == "choices"
    assert shapes.native_problem("completions", {"choices": [{"text": "a"}]}) is None
    assert shapes.native_problem("completions", {"choices": []}) is not None
    assert shapes.native_problem("responses", {"output": []}) is None  # a background Response
    assert shapes.native_problem("responses", {"output": {}}) is not None
