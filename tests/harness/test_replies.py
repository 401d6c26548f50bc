"""Chat completion answers read alike, plain or streamed, however they are broken."""

from __future__ import annotations

import json

from gateway.testing.harness.replies import parse_reply


def sse(*events: object) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )


def delta(content: str | None = None, **extra: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": content, **extra}}]}


def test_a_plain_completion_with_text_and_tool_calls() -> None:
    body = {
        "object": "chat.completion",
        "choices": [
            {
                "message": {
                    "content": "hello",
                    "tool_calls": [{"function": {"name": "f", "arguments": '{"q": 1}'}}],
                }
            }
        ],
    }
    reply = parse_reply(json.dumps(body).encode(), stream=False)
    assert reply.valid_completion
    assert reply.texts == ["hello", '{"q": 1}']


def test_a_plain_error_body_and_a_broken_body() -> None:
    error = parse_reply(b'{"error": {"code": "rate_limited", "type": "x"}}', stream=False)
    assert error.error_code == "rate_limited" and not error.valid_completion
    broken = parse_reply(b'{"id": "chatcmpl-x", "choices": [', stream=False)
    assert broken.unparsable and not broken.valid_completion


def test_a_stream_joins_its_text_and_each_calls_arguments_by_index() -> None:
    call = {"index": 1, "function": {"arguments": '{"a"'}}
    more = {"index": 1, "function": {"arguments": ": 2}"}}
    first = {"index": 0, "function": {"arguments": "{}"}}
    raw = sse(
        delta("Hel"),
        delta("lo"),
        delta(tool_calls=[call]),
        delta(tool_calls=[first, more]),
        b"[DONE]",
    )
    reply = parse_reply(raw, stream=True)
    assert reply.valid_stream
    assert reply.texts == ["Hello", "{}", '{"a": 2}']


def test_a_stream_is_invalid_without_done_with_an_error_event_or_with_data_after_done() -> None:
    assert not parse_reply(sse(delta("cut")), stream=True).valid_stream
    errored = parse_reply(sse(delta("x"), {"error": {"code": "upstream_error"}}, b"[DONE]"), True)
    assert errored.stream_errors == ["upstream_error"] and not errored.valid_stream
    late = parse_reply(sse(delta("x"), b"[DONE]", delta("y")), stream=True)
    assert late.after_done and not late.valid_stream
    garbled = parse_reply(sse(delta("x"), b"{not json", b"[DONE]"), stream=True)
    assert garbled.stream_errors == ["unparsable_event"] and not garbled.valid_stream
