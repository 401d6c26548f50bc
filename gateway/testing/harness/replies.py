"""What a chat completion answer says, read the same way whether it came whole (JSON) or as a
stream of server-sent events: its text, each tool call's arguments, the error it carries, and
for a stream whether it ended properly ([DONE] last, nothing after it).

Benchmarks judge answers by this (is it a valid completion, whose marker does its text carry);
it never raises on a broken body, it says what was wrong with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChatReply:
    object: str | None = None  # "chat.completion" for a plain answer
    content: str = ""
    tool_arguments: list[str] = field(default_factory=list)  # each call's, in index order
    error_code: str | None = None  # the error body's code (or type), plain answers
    stream_errors: list[str] = field(default_factory=list)  # error events' codes, in order
    done: bool = False  # a stream's [DONE] came
    after_done: bool = False  # ... and data came after it
    unparsable: bool = False  # the body (plain) or an event (stream) was not JSON

    @property
    def texts(self) -> list[str]:
        """The content, then each tool call's arguments."""
        return [self.content, *self.tool_arguments]

    @property
    def valid_completion(self) -> bool:
        """A plain answer: a chat completion with text."""
        return self.object == "chat.completion" and bool(self.content)

    @property
    def valid_stream(self) -> bool:
        """A stream: chunks with text, no error event, [DONE] last."""
        return self.done and not self.after_done and not self.stream_errors and bool(self.content)


def _error_code(error: Any) -> str:
    error = error if isinstance(error, dict) else {}
    return str(error.get("code") or error.get("type"))


def parse_plain(raw: bytes) -> ChatReply:
    reply = ChatReply()
    try:
        data = json.loads(raw)
    except ValueError:
        reply.unparsable = True
        return reply
    if not isinstance(data, dict):
        reply.unparsable = True
        return reply
    if "error" in data:
        reply.error_code = _error_code(data["error"])
        return reply
    reply.object = data.get("object")
    choices = data.get("choices") or [{}]
    message = (choices[0] if isinstance(choices[0], dict) else {}).get("message") or {}
    content = message.get("content")
    reply.content = content if isinstance(content, str) else ""
    for call in message.get("tool_calls") or []:
        reply.tool_arguments.append((call.get("function") or {}).get("arguments") or "")
    return reply


def parse_stream(raw: bytes) -> ChatReply:
    reply = ChatReply()
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for line in raw.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if reply.done:
            reply.after_done = True
            continue
        if payload == b"[DONE]":
            reply.done = True
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            reply.unparsable = True
            reply.stream_errors.append("unparsable_event")
            continue
        if "error" in event:
            reply.stream_errors.append(_error_code(event["error"]))
            continue
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                args = (call.get("function") or {}).get("arguments") or ""
                calls.setdefault(int(call.get("index") or 0), []).append(args)
    reply.content = "".join(content)
    reply.tool_arguments = ["".join(parts) for _, parts in sorted(calls.items())]
    return reply


def parse_reply(raw: bytes, stream: bool) -> ChatReply:
    """`raw` as a stream of events (`stream`) or as one JSON body."""
    return parse_stream(raw) if stream else parse_plain(raw)
