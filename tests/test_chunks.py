from collections.abc import AsyncIterator
from typing import Any

from gateway.reply.chunks import Accumulator, replay

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "system_fingerprint": "fp",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "logprobs": None,
            "message": {"role": "assistant", "content": "  Hello there,  general Kenobi.\n"},
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
}


async def _all(batches: AsyncIterator[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [c async for batch in batches for c in batch]


async def test_replay_round_trips_through_the_accumulator() -> None:
    chunks = await _all(replay(COMPLETION, include_usage=True))
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"] != "chatcmpl-1"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == COMPLETION["usage"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert len(chunks) >= 4  # role, several content pieces, finish, usage
    acc = Accumulator()
    for chunk in chunks:
        acc.add(chunk)
    rebuilt = acc.completion()
    assert rebuilt["choices"][0]["message"]["content"] == "  Hello there,  general Kenobi.\n"
    assert rebuilt["usage"] == COMPLETION["usage"] and rebuilt["system_fingerprint"] == "fp"


async def test_replay_without_usage_has_no_usage_chunk() -> None:
    chunks = await _all(replay(COMPLETION, include_usage=False))
    assert all(c["choices"] for c in chunks) and all("usage" not in c for c in chunks)


def test_accumulator_merges_tool_call_fragments_by_index() -> None:
    acc = Accumulator()
    deltas = [
        {"role": "assistant", "content": None},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "a",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "b",
                    "type": "function",
                    "function": {"name": "g", "arguments": '{"y"'},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]},
    ]
    for delta in deltas:
        acc.add({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]})
    acc.add({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    message = acc.completion()["choices"][0]["message"]
    assert [c["function"] for c in message["tool_calls"]] == [
        {"name": "f", "arguments": '{"x": 1}'},
        {"name": "g", "arguments": '{"y": 2}'},
    ]
    assert [c["id"] for c in message["tool_calls"]] == ["a", "b"]
    assert acc.completion()["choices"][0]["finish_reason"] == "tool_calls"
