"""A chat completion -> a Response object: output items, status and usage.

The stream translator (events.py) builds the same objects item by item, so a streamed
response's `response.completed` equals what the plain call returns.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.responses.items import (
    call_item,
    message_item,
    new_id,
    reasoning_item,
    reasoning_part,
    refusal_part,
    text_part,
)
from gateway.responses.request import ResponsesRequest

Json = dict[str, Any]

# finish_reason -> why a response is incomplete (other reasons complete it)
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_object(
    response_id: str,
    request: ResponsesRequest,
    body: Json,
    *,
    model: str,
    output: list[Json],
    status: str,
    created_at: int,
    usage: Json | None = None,
    finish_reason: str | None = None,
    error: Json | None = None,
) -> Json:
    """The Response as the official schema has it: the request's settings echoed, `error`,
    `incomplete_details` and `instructions` present even when null."""
    reason = INCOMPLETE.get(finish_reason or "")
    if status == "completed" and reason is not None:
        status = "incomplete"
    text = request.text or {}
    response: Json = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": reason} if status == "incomplete" and reason else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "reasoning": request.reasoning,
        "store": request.stores,
        "temperature": request.temperature if request.temperature is not None else 1.0,
        "text": {**text, "format": text.get("format") or {"type": "text"}},
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": [_tool(tool) for tool in body.get("tools") or []],
        "top_p": request.top_p if request.top_p is not None else 1.0,
        "truncation": request.truncation or "disabled",
        "metadata": request.metadata or {},
    }
    if request.user is not None:
        response["user"] = request.user
    if usage is not None:
        response["usage"] = response_usage(usage)
    return response


def _tool(tool: Json) -> Json:
    """A tool as the Response echoes it: a function tool with every field, null if unset."""
    if tool.get("type") != "function":
        return tool
    return {"description": None, "parameters": None, "strict": None, **tool}


def output_items(completion: Json) -> list[Json]:
    """The first choice's message as output items: its text (or refusal), then its calls."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    status = "incomplete" if choice.get("finish_reason") in INCOMPLETE else "completed"
    items = []
    if message.get("reasoning_content"):  # an open model's thinking (DeepSeek, vLLM)
        part = reasoning_part(message["reasoning_content"])
        items.append(reasoning_item(new_id("rs"), [part], "completed"))
    calls = message.get("tool_calls") or []
    if message.get("refusal"):
        items.append(message_item(new_id("msg"), [refusal_part(message["refusal"])], status))
    elif message.get("content") or not calls:
        items.append(message_item(new_id("msg"), [text_part(message.get("content") or "")], status))
    for call in calls:
        function = call.get("function") or {}
        items.append(
            call_item(
                new_id("fc"),
                call.get("id") or new_id("call"),
                function.get("name", ""),
                function.get("arguments", ""),
                "completed",
            )
        )
    return items


def response_usage(usage: Json) -> Json:
    """Chat usage -> Responses usage, with the cached and reasoning details when present."""
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _count(prompt_details.get("cached_tokens")),
            "cache_write_tokens": _count(prompt_details.get("cache_write_tokens")),
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _count(completion_details.get("reasoning_tokens"))
        },
        "total_tokens": _count(usage.get("total_tokens")) or prompt + completion,
    }


def conversation_output(output: list[Json]) -> list[Json]:
    """A response's output items as the chat message a later turn replays. A provider's own
    Response (a native one) may hold items of any shape: only what reads as text or a call
    counts."""
    items = [item for item in output if isinstance(item, dict)]
    content = "".join(
        _text_of(part)
        for item in items
        if item.get("type") == "message" and isinstance(item.get("content"), list)
        for part in item["content"]
    )
    calls = [
        {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments")},
        }
        for item in items
        if item.get("type") == "function_call"
    ]
    message: Json = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _text_of(part: Any) -> str:
    text = (part.get("text") or part.get("refusal")) if isinstance(part, dict) else None
    return text if isinstance(text, str) else ""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
