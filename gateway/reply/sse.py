"""Server-sent events, both ways: parse an upstream's event stream, encode ours."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def encode(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def iter_events(pieces: AsyncIterable[bytes]) -> AsyncIterator[list[bytes]]:
    """For each piece read from the network, the `data` of every event it completed (an
    `EventReader` fed piece by piece)."""
    reader = EventReader()
    async for piece in pieces:
        events = reader.feed(piece)
        if events:
            yield events
    events = reader.end()
    if events:
        yield events


class EventReader:
    """The parser, fed one network read at a time: a provider adapter feeds it directly, so a
    streamed token costs no async generator of its own.

    Events stay grouped as they arrived so the relay can answer one read with one write.
    Comments and `event:`/`id:`/`retry:` fields are skipped: OpenAI-style streams carry
    everything in `data`. Lines may end in LF or CRLF; data stays bytes (orjson reads bytes).
    A read that holds only `data: ...` events of one line each, LF-framed (what OpenAI and
    most upstreams send), is cut up in a few C-level scans (`_plain_events`); anything else
    goes line by line.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data_lines: list[bytes] = []
        self._crlf = False  # once a CR is seen, every line goes through _feed

    def feed(self, piece: bytes) -> list[bytes]:
        """The data of the events this piece completed."""
        buffer = self._buffer + piece
        events: list[bytes] = []
        if not self._crlf and b"\r" in buffer:
            self._crlf = True
        if self._crlf:
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                _feed(raw[:-1] if raw.endswith(b"\r") else raw, self._data_lines, events)
        else:
            end = buffer.rfind(b"\n\n") + 2  # just after the last complete event
            if end > 1:
                complete, buffer = buffer[:end], buffer[end:]
                plain = _plain_events(complete)
                events = plain if plain is not None else _block_events(complete, self._data_lines)
        self._buffer = buffer
        return events

    def end(self) -> list[bytes]:
        """The stream ended: the data of an event it left without its blank line."""
        data_lines = self._data_lines
        *lines, buffer = self._buffer.split(b"\n")  # LF mode: an unfinished event's lines
        for raw in lines:
            _feed(raw[:-1] if raw.endswith(b"\r") else raw, data_lines, [])
        if buffer.startswith(b"data:"):
            value = buffer[5:]
            data_lines.append(value[1:] if value[:1] == b" " else value)
        return [b"\n".join(data_lines)] if data_lines else []


def _plain_events(complete: bytes) -> list[bytes] | None:
    """The data of `complete` (whole events, ending in a blank line) when it is nothing but
    `data: VALUE` events of one line each, else None. Its only newlines are then the two
    that end each event, and every event after the first follows a `\\n\\ndata: `."""
    if not complete.startswith(b"data: "):
        return None
    if complete.find(b"\n") == len(complete) - 2:  # one event (a token, as most reads bring)
        return [complete[6:-2]]
    separators = complete.count(b"\n\ndata: ")
    if complete.count(b"\n") != 2 * (separators + 1):
        return None
    return complete[6:-2].split(b"\n\ndata: ")


def _block_events(complete: bytes, data_lines: list[bytes]) -> list[bytes]:
    """The data of whole LF-framed events, each read field by field."""
    events: list[bytes] = []
    for block in complete.split(b"\n\n")[:-1]:  # what follows the last is blank lines only
        for line in block.split(b"\n"):
            _feed(line, data_lines, events)
        _feed(b"", data_lines, events)  # the blank line that ended the block
    return events


def _feed(line: bytes, data_lines: list[bytes], events: list[bytes]) -> None:
    """One line (its end removed): a blank line ends the event, a `data:` line adds to it."""
    if not line:
        if data_lines:
            events.append(b"\n".join(data_lines))
            data_lines.clear()
        return
    name, _, value = line.partition(b":")
    if name == b"data":
        data_lines.append(value[1:] if value[:1] == b" " else value)
