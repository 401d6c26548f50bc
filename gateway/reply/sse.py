"""Server-sent events, both ways: parse an upstream's event stream, encode ours."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def encode(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def iter_events(pieces: AsyncIterable[bytes]) -> AsyncIterator[list[bytes]]:
    """For each piece read from the network, the `data` of every event it completed.

    Events stay grouped as they arrived so the relay can answer one read with one write.
    Comments and `event:`/`id:`/`retry:` fields are skipped: OpenAI-style streams carry
    everything in `data`. Lines may end in LF or CRLF; data stays bytes (orjson reads bytes).
    """
    buffer = b""
    data_lines: list[bytes] = []
    async for piece in pieces:
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        events = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if data_lines:
                    events.append(b"\n".join(data_lines))
                    data_lines = []
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                data_lines.append(value[1:] if value[:1] == b" " else value)
        if events:
            yield events
    if buffer.startswith(b"data:"):
        value = buffer[5:]
        data_lines.append(value[1:] if value[:1] == b" " else value)
    if data_lines:
        yield [b"\n".join(data_lines)]
