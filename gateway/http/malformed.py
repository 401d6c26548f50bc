"""Requests too broken to reach the application (a bad request line, a header with a control
character, an oversized header): aiohttp's HTTP parser answers those itself, with a plain-text
body that quotes the offending bytes, and logs them with a traceback at ERROR. Those bytes can
be an API key. Here they get an OpenAI error body that quotes nothing, and one log line that
names the problem but not the bytes.

aiohttp has no setting for this, so `install()` replaces RequestHandler.handle_error for the
process (it is only called for errors raised outside the application's handlers: everything
inside goes through the gateway's middleware).
"""

from __future__ import annotations

import logging
from http import HTTPStatus

import orjson
from aiohttp import web
from aiohttp.http import HttpVersion11
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway.errors import GatewayError
from gateway.http.middleware import request_id

log = logging.getLogger("gateway")
_installed = False


def _handle_error(
    self: RequestHandler,
    request: BaseRequest,
    status: int = 500,
    exc: BaseException | None = None,
    message: str | None = None,
) -> web.StreamResponse:
    reason = type(exc).__name__ if exc is not None else HTTPStatus(status).phrase
    log.info("malformed HTTP request from %s: %s (HTTP %d)", request.remote, reason, status)
    if request.writer.output_size > 0:  # a response already started: nothing more to say
        raise ConnectionError("response already started")
    # aiohttp stands a version-less HTTP/1.0 request in for the broken one, so its answer would
    # say HTTP/1.0; the gateway speaks 1.1 (with Connection: close, from force_close below).
    request._message = request._message._replace(version=HttpVersion11)
    if hasattr(request, "_version"):  # newer aiohttp keeps it apart from the message
        request._version = HttpVersion11
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    response = _error_response(
        GatewayError(
            f"{phrase}: the request is not valid HTTP ({reason}).",
            status=status,
            type="invalid_request_error" if status < 500 else "server_error",
            code="malformed_http_request" if status < 500 else "internal_error",
        )
    )
    response.force_close()
    return response


def install() -> None:
    global _installed
    if not _installed:
        RequestHandler.handle_error = _handle_error  # type: ignore[method-assign]
        _installed = True


async def expect_handler(request: web.Request) -> web.StreamResponse | None:
    """`Expect: 100-continue` as aiohttp does it; any other expectation gets a 417 with an
    OpenAI error body (aiohttp's own answer is plain text, before the middleware runs)."""
    expect = request.headers.get("Expect", "")
    if expect.lower() == "100-continue":
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the body proper has not started
        return None
    response = _error_response(
        GatewayError(
            "Unsupported Expect header: only 100-continue is understood.",
            status=417,
            type="invalid_request_error",
            code="expectation_failed",
        )
    )
    response.headers["x-request-id"] = request_id(None)
    return response


def _error_response(err: GatewayError) -> web.Response:
    """The OpenAI error body without a RequestContext (the middleware has not run)."""
    return web.Response(
        status=err.status, body=orjson.dumps(err.body()), content_type="application/json"
    )
