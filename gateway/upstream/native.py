"""Native passthrough: the OpenAI endpoints besides chat completions that an upstream serves
itself (`native:` in its provider config), read as they come.

The gateway relays these answers unchanged; it only checks what it must rely on: a plain
answer is a JSON object (completions: with a list of choices; responses: with a list of output
items: `shapes.native_problem`), and a stream is events of JSON objects. A stream's `event:`
names (Responses streams have them) are kept under `EVENT` so the event can be written out
again as it came. A completions stream ends at `[DONE]`; a Responses stream has no `[DONE]`
and ends after its terminal event.
"""

from __future__ import annotations

from typing import Any, Literal

Json = dict[str, Any]
Endpoint = Literal["completions", "responses"]

PATHS: dict[str, str] = {"completions": "/completions", "responses": "/responses"}
# Where a relayed event keeps its SSE `event:` name; removed when it is written again.
EVENT = "_sse_event"
# The events that end a Responses stream (nothing comes after them).
RESPONSES_TERMINAL = frozenset(
    {"response.completed", "response.failed", "response.incomplete", "error"}
)


def ends(endpoint: str, event: Json) -> bool:
    """Whether `event` is the last of a Responses stream (completions end at [DONE])."""
    return endpoint == "responses" and event.get("type") in RESPONSES_TERMINAL


def is_error(endpoint: str, event: Json) -> bool:
    """An error an upstream reports inside its stream: `{"error": ...}` in a completions
    stream, an `error` event in a Responses stream."""
    if endpoint == "responses":
        return event.get("type") == "error"
    return "error" in event and "choices" not in event


class NamedEventReader:
    """SSE parsed line by line, each event's `data` with its `event:` name (None without
    one). Fed one network read at a time; lines may end in LF or CRLF."""

    def __init__(self) -> None:
        self._buffer = b""
        self._name: bytes | None = None
        self._data: list[bytes] = []

    def feed(self, piece: bytes) -> list[tuple[str | None, bytes]]:
        *lines, self._buffer = (self._buffer + piece).split(b"\n")
        events: list[tuple[str | None, bytes]] = []
        for line in lines:
            self._line(line[:-1] if line.endswith(b"\r") else line, events)
        return events

    def end(self) -> list[tuple[str | None, bytes]]:
        """The stream ended: an event it left without its blank line."""
        events: list[tuple[str | None, bytes]] = []
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r"), events)
            self._buffer = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[tuple[str | None, bytes]]) -> None:
        if not line:
            if self._data:
                name = self._name.decode("utf-8", "replace") if self._name else None
                events.append((name, b"\n".join(self._data)))
            self._name, self._data = None, []
            return
        field, _, value = line.partition(b":")
        value = value[1:] if value[:1] == b" " else value
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._name = value
