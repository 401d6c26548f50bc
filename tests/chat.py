"""Chat requests as clients build them, shared by unit and end-to-end tests: tool
definitions, rounds of tool calls and their results, long histories."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

Json = dict[str, Any]


def function_tool(name: str, properties: Json, required: Iterable[str] = (), **schema: Any) -> Json:
    """A `tools` entry of type function whose parameters are an object of `properties`."""
    parameters: Json = {"type": "object", "properties": properties, **schema}
    if required:
        parameters["required"] = list(required)
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def tool_round(calls: Sequence[tuple[str, str, Any, str]]) -> list[Json]:
    """An assistant message with these (id, tool, arguments, result) calls, then one tool
    message per result. Arguments given as a dict are sent as JSON text, as clients do."""
    tool_calls = [
        {
            "id": id_,
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
            },
        }
        for id_, name, args, _ in calls
    ]
    results = [{"role": "tool", "tool_call_id": id_, "content": r} for id_, _, _, r in calls]
    return [{"role": "assistant", "content": None, "tool_calls": tool_calls}, *results]


def repeated_calls(question: str, call: Json, result: str, rounds: int) -> list[Json]:
    """An agent history: the user's `question`, then `rounds` times the same tool call
    (`{"name", "arguments"}`) and the same `result`: what a loop looks like."""
    messages: list[Json] = [{"role": "user", "content": question}]
    arguments = json.dumps(call["arguments"])
    for i in range(rounds):
        messages += tool_round([(f"call_{i}", call["name"], arguments, result)])
    return messages


def long_conversation(turns: int, topic: str = "squared") -> list[Json]:
    """A system message, `turns` alternating questions and answers, and a last question about
    the first: what compression has to shorten."""
    messages: list[Json] = [{"role": "system", "content": "You are helpful."}]
    for i in range(turns // 2):
        messages.append({"role": "user", "content": f"Question {i}: what is {i} {topic}?"})
        messages.append({"role": "assistant", "content": f"{i} squared is {i * i}."})
    messages.append({"role": "user", "content": "And what did I ask first?"})
    return messages
