from collections.abc import AsyncIterator

import pytest

from gateway.reply import sse


async def _pieces(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _collect(*parts: bytes) -> list[str]:
    return [data.decode() async for events in sse.iter_events(_pieces(*parts)) for data in events]


@pytest.mark.parametrize(
    "parts",
    [
        (b'data: {"a":1}\n\ndata: [DONE]\n\n',),
        (b"da", b'ta: {"a"', b":1}\n", b"\ndata: [DO", b"NE]\n\n"),
        (b'data: {"a":1}\r\n\r\ndata: [DONE]\r\n\r\n',),
        (b': keep-alive\n\nevent: message\nid: 7\ndata: {"a":1}\n\ndata:[DONE]\n\n',),
        (b'data: {"a":1}\n\ndata: [DONE]',),  # no trailing blank line
    ],
)
async def test_events_survive_any_framing(parts: tuple[bytes, ...]) -> None:
    assert await _collect(*parts) == ['{"a":1}', "[DONE]"]


async def test_multiline_data_is_joined() -> None:
    assert await _collect(b"data: line one\ndata: line two\n\n") == ["line one\nline two"]


async def test_events_stay_grouped_by_the_read_that_completed_them() -> None:
    pieces = (b"data: 1\n\ndata: 2\n\nda", b"ta: 3\n\n")
    assert [events async for events in sse.iter_events(_pieces(*pieces))] == [[b"1", b"2"], [b"3"]]


def test_encode_is_one_event() -> None:
    assert sse.encode({"x": "é"}) == 'data: {"x":"é"}\n\n'.encode()
    assert sse.DONE == b"data: [DONE]\n\n"
