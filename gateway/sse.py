"""Server-sent events, both ways: parse an upstream's event stream, encode ours."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def encode(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def iter_data(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """Yield the `data` of each event in a byte stream (SSE framing, any chunk boundaries).

    Comments and `event:`/`id:`/`retry:` fields are skipped: OpenAI-style streams carry
    everything in `data`. Lines may end in LF or CRLF. Bytes that are not UTF-8 raise
    UnicodeDecodeError (the caller decides what a broken upstream means).
    """
    buffer = b""
    data_lines: list[str] = []
    async for piece in chunks:
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if data_lines:
                    yield "\n".join(data_lines)
                    data_lines = []
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                data_lines.append(value[1:].decode() if value[:1] == b" " else value.decode())
    if buffer.startswith(b"data:"):
        value = buffer[5:]
        data_lines.append(value[1:].decode() if value[:1] == b" " else value.decode())
    if data_lines:
        yield "\n".join(data_lines)
