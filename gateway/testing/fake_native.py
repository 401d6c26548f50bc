"""What the fake upstream answers on the endpoints an upstream may serve natively besides chat:
legacy `/v1/completions` and `/v1/responses`, plain and streamed, deterministic.

Completions: one choice per prompt and `n` (index `prompt * n + i`); the text is
`Echo: <prompt>` (a token prompt shows its ids), `Fill: <prompt> ... <suffix>` with a suffix,
the prompt in front with `echo`; `logprobs: N` gives every token (the text cut at word ends)
a logprob of -0.01 times its position, its top N alternatives below it, and its offset.
Responses: a message whose text is `Echo: <last user text>`, after a completed
`web_search_call` item (its query the same text) when the request has a web search tool.
The `content` knob replaces the echo in both.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Protocol

import orjson

Json = dict[str, Any]
Event = tuple[str | None, bytes]  # an SSE event's name (None: no `event:` line) and data

_TOKEN = re.compile(r"\S+\s*|\s+")


class Knobs(Protocol):
    """The fake's knobs these answers read (gateway/testing/fake_upstream.py `Knobs`)."""

    content: str | None
    extra: Json


# --- legacy completions ---------------------------------------------------------------------


def completion(body: Json, knobs: Knobs) -> Json:
    prompts = _prompts(body)
    return {
        "id": _id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": str(body.get("model")),
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "text": text,
                "index": index,
                "logprobs": _logprobs(body, text),
                "finish_reason": "stop",
            }
            for index, text in _texts(body, knobs, prompts)
        ],
        "usage": _usage(len(prompts), len(prompts) * int(body.get("n") or 1)),
        **knobs.extra,
    }


def completion_chunks(body: Json, knobs: Knobs) -> list[Event]:
    """A stream: each choice token by token, then its finish, a usage chunk when asked, and
    [DONE] (written by the caller)."""
    id_, created, model = _id("cmpl"), int(time.time()), str(body.get("model"))
    prompts = _prompts(body)

    def chunk(index: int, text: str, logprobs: Json | None, finish: str | None) -> Event:
        choice = {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}
        data = {"id": id_, "object": "text_completion", "created": created, "model": model}
        return None, orjson.dumps({**data, "choices": [choice], **knobs.extra})

    out: list[Event] = []
    for index, text in _texts(body, knobs, prompts):
        whole = _logprobs(body, text)  # each chunk carries its token's share
        for k, token in enumerate(_TOKEN.findall(text)):
            share = None if whole is None else {key: [values[k]] for key, values in whole.items()}
            out.append(chunk(index, token, share, None))
        out.append(chunk(index, "", None, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = _usage(len(prompts), len(prompts) * int(body.get("n") or 1))
        head = {"id": id_, "object": "text_completion", "created": created, "model": model}
        out.append((None, orjson.dumps({**head, "choices": [], "usage": usage})))
    return out


def _prompts(body: Json) -> list[str]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    items = list(prompt or [])
    if items and all(isinstance(i, int) for i in items):
        items = [items]  # one prompt of token ids
    return [p if isinstance(p, str) else " ".join(map(str, p)) for p in items]


def _texts(body: Json, knobs: Knobs, prompts: list[str]) -> list[tuple[int, str]]:
    n = int(body.get("n") or 1)
    out = []
    for p, prompt in enumerate(prompts):
        answer = knobs.content if knobs.content is not None else f"Echo: {prompt}"
        if body.get("suffix"):
            answer = f"Fill: {prompt} ... {body['suffix']}"
        text = prompt + answer if body.get("echo") else answer
        out += [(p * n + i, text) for i in range(n)]
    return out


def _logprobs(body: Json, text: str) -> Json | None:
    top = body.get("logprobs")
    if top is None:
        return None
    tokens = _TOKEN.findall(text)
    offsets, logprobs, alternatives = [], [], []
    offset = 0
    for position, token in enumerate(tokens):
        logprob = round(-0.01 * (position + 1), 4)
        offsets.append(offset)
        logprobs.append(logprob)
        alternatives.append(
            {token: logprob, **{f"alt{j}": logprob - 1 - j for j in range(max(0, int(top) - 1))}}
        )
        offset += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": alternatives,
        "text_offset": offsets,
    }


def _usage(prompts: int, choices: int) -> Json:
    prompt, completion_tokens = 10 * prompts, 5 * choices
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


# --- responses ------------------------------------------------------------------------------


def response(body: Json, knobs: Knobs) -> Json:
    return _response(body, knobs, _id("resp"), _output(body, knobs), "completed")


def response_events(body: Json, knobs: Knobs) -> list[Event]:
    """The official event sequence, with `event:` names and sequence numbers, no [DONE]."""
    response_id = _id("resp")
    output = _output(body, knobs)
    events: list[Json] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, **fields, "sequence_number": len(events)})

    started = _response(body, knobs, response_id, [], "in_progress")
    add("response.created", response=started)
    add("response.in_progress", response=started)
    for index, item in enumerate(output):
        add("response.output_item.added", output_index=index, item=_in_progress(item))
        if item["type"] == "web_search_call":
            for stage in ("in_progress", "searching", "completed"):
                add(f"response.web_search_call.{stage}", output_index=index, item_id=item["id"])
        else:
            _message_events(add, index, item)
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=_response(body, knobs, response_id, output, "completed"))
    return [(e["type"], orjson.dumps(e)) for e in events]


def _message_events(add: Any, index: int, item: Json) -> None:
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    add("response.content_part.added", **where, part={**part, "text": ""})
    for token in _TOKEN.findall(part["text"]):
        add("response.output_text.delta", **where, delta=token, logprobs=[])
    add("response.output_text.done", **where, text=part["text"], logprobs=[])
    add("response.content_part.done", **where, part=part)


def _output(body: Json, knobs: Knobs) -> list[Json]:
    text = _last_user_text(body)
    items: list[Json] = []
    if any(str(t.get("type", "")).startswith("web_search") for t in body.get("tools") or []):
        items.append(
            {
                "type": "web_search_call",
                "id": _id("ws"),
                "status": "completed",
                "action": {"type": "search", "query": text},
            }
        )
    answer = knobs.content if knobs.content is not None else f"Echo: {text}"
    part = {"type": "output_text", "text": answer, "annotations": [], "logprobs": []}
    message = {"type": "message", "id": _id("msg"), "status": "completed", "role": "assistant"}
    items.append({**message, "content": [part]})
    return items


def _in_progress(item: Json) -> Json:
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    return {**item, "status": "in_progress"}


def _response(body: Json, knobs: Knobs, response_id: str, output: list[Json], status: str) -> Json:
    out: Json = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": str(body.get("model")),
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "metadata": body.get("metadata") or {},
        **knobs.extra,
    }
    if isinstance(body.get("user"), str):
        out["user"] = body["user"]
    if status == "completed":
        out["usage"] = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
    return out


def _last_user_text(body: Json) -> str:
    given = body.get("input")
    if isinstance(given, str):
        return given
    for item in reversed(given or []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
    return ""


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}" if prefix != "cmpl" else f"cmpl-{uuid.uuid4().hex}"
