"""A request body read within its size limit and the body read timeout.

The timeout is the longest silence while the handler waits for body bytes
(`server.body_timeout_seconds`, as nginx's client_body_timeout), so a client that stops
sending mid-body gets a 408 instead of holding its connection and handler for ever. A body
that has already arrived (nearly all of them) is read without a timer.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.errors import PayloadTooLarge
from gateway.http.keys import METRICS
from gateway.server.connections import ClientTooSlow


async def read_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """The body as decoded (chunked, compressed), refused past `limit` bytes."""
    content = request.content
    if content.is_eof():  # all here: no waiting, no timer
        body = await content.read()
        if len(body) > limit:
            raise too_large(limit)
        return body
    pieces = bytearray()
    while True:
        try:
            async with asyncio.timeout(timeout):
                piece = await content.readany()
        except TimeoutError:
            request.app[METRICS].client_timed_out("body")
            raise ClientTooSlow(
                f"The request body stopped arriving: no bytes for {timeout:g} s "
                "(server.body_timeout_seconds)."
            ) from None
        if not piece:
            return bytes(pieces)
        pieces += piece
        if len(pieces) > limit:
            raise too_large(limit)


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
