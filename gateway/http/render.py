"""Turning results into HTTP responses: JSON bodies, OpenAI error bodies and SSE streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import aclosing
from typing import Any, Protocol

import orjson
from aiohttp import web

from gateway.context import RequestContext
from gateway.errors import GatewayError, InternalError
from gateway.http.keys import DRAIN
from gateway.reply import sse
from gateway.reply.headers import answer_headers
from gateway.reply.reply import Reply
from gateway.server.shutdown import ShuttingDown

log = logging.getLogger("gateway")
Json = dict[str, Any]
CLIENT_CLOSED = 499  # nginx's convention; only ever logged, never sent


def json(ctx: RequestContext, data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(data),
        status=status,
        content_type="application/json",
        headers=_headers(ctx),
    )


def error(ctx: RequestContext, err: GatewayError) -> web.Response:
    ctx.status = err.status
    ctx.error_code = err.code or err.type
    response = json(ctx, err.body(), err.status)
    response.headers.update(err.headers)
    return response


class StreamForm(Protocol):
    """How one endpoint's stream is written: chat chunks as they are, or translated (a
    Responses event stream, legacy text completions)."""

    def batch(self, chunks: list[Json]) -> bytes:
        """The bytes for one batch of chat chunks (may be empty)."""
        ...

    def failed(self, err: GatewayError) -> bytes:
        """A failure after the headers went out."""
        ...

    async def end(self) -> bytes:
        """What ends the stream, after a failure too (it may finish work first)."""
        ...


class ChatChunks:
    """Chat completion chunks as they are, an error event, then data: [DONE]."""

    def batch(self, chunks: list[Json]) -> bytes:
        return b"".join(map(sse.encode, chunks))

    def failed(self, err: GatewayError) -> bytes:
        return sse.encode(err.body())

    async def end(self) -> bytes:
        return sse.DONE


CHAT_CHUNKS = ChatChunks()
# The form a request's stream is written in, set by its handler once it knows the request
# streams (`streams`): a shutdown that ends the request before its first byte writes in it.
STREAM_FORM: web.RequestKey[StreamForm] = web.RequestKey("stream_form")


def streams(request: web.Request, form: StreamForm = CHAT_CHUNKS) -> None:
    """This request answers as an SSE stream written by `form`."""
    request[STREAM_FORM] = form


async def stream(
    request: web.Request, ctx: RequestContext, reply: Reply, form: StreamForm = CHAT_CHUNKS
) -> web.StreamResponse:
    """Relay a reply's chunks as SSE, written by `form`. After prepare() the status is sent, so
    failures become what `form.failed` writes (chat: an SSE error event followed by [DONE])."""
    response = _sse_response(ctx)
    drain = request.app[DRAIN]
    task = asyncio.current_task()
    try:
        await response.prepare(request)
        async with aclosing(reply.relay()) as relay:
            try:
                first = True  # the first write goes out even when empty: it carries the headers
                async for batch in relay:
                    data = form.batch(batch)
                    if data or first:
                        await response.write(data)
                        first = False
            except GatewayError as err:
                ctx.error_code = err.code or err.type
                await response.write(form.failed(err))
            except ConnectionResetError:
                raise  # the client left while a batch was written: below, not a bug
            except Exception:
                # Headers are sent: a bug must still end as a well-formed stream.
                log.exception("unhandled error mid-stream in request %s", ctx.request_id)
                internal = internal_error(ctx)
                ctx.error_code = internal.code
                await response.write(form.failed(internal))
        await response.write_eof(await form.end())  # one write: the end and the end of the body
    except ConnectionResetError:
        # The client left; closing the relay above already released the upstream request.
        ctx.status, ctx.error_code = CLIENT_CLOSED, "client_disconnected"
    except asyncio.CancelledError:
        if not drain.ended(task):
            raise
        # Ended by the shutdown (Drain.expire), not by the client: say so, then finish.
        await _end_for_shutdown(request, response, ctx, form)
    return response


async def shutting_down(request: web.Request, ctx: RequestContext) -> web.StreamResponse:
    """The answer of a request the shutdown timeout ended before it answered: a stream (still
    waiting for its upstream's first byte) gets its headers, the error event and its end, as
    one that had started; any other request a 503 with Retry-After."""
    form = request.get(STREAM_FORM)
    if form is None:
        return error(ctx, ShuttingDown())
    response = _sse_response(ctx)
    await _end_for_shutdown(request, response, ctx, form)
    return response


async def _end_for_shutdown(
    request: web.Request, response: web.StreamResponse, ctx: RequestContext, form: StreamForm
) -> None:
    ctx.status, ctx.error_code = 200, ShuttingDown.code
    with contextlib.suppress(ConnectionResetError):
        await response.prepare(request)  # a no-op once prepared
        await response.write_eof(form.failed(ShuttingDown()) + await form.end())


def _sse_response(ctx: RequestContext) -> web.StreamResponse:
    return _SseResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **_headers(ctx),
        }
    )


class _SseResponse(web.StreamResponse):
    """An event stream whose headers leave with its first batch of events (already in hand when
    the response is prepared): one write fewer per stream. aiohttp before 3.12 ignores the
    attribute and sends them at prepare(), as a StreamResponse does."""

    _send_headers_immediately = False


def internal_error(ctx: RequestContext) -> InternalError:
    return InternalError(
        f"The gateway hit an internal error. Quote request id {ctx.request_id} when reporting it."
    )


def _headers(ctx: RequestContext) -> dict[str, str]:
    # A hit replays the headers of the answer it serves; what this request decided wins.
    headers = {
        "x-request-id": ctx.request_id,
        **ctx.response_headers,
        **ctx.replayed_headers,
        **answer_headers(ctx),
    }
    if ctx.cache_result is not None:
        headers["x-gateway-cache"] = ctx.cache_result
        if ctx.cache_similarity is not None:
            headers["x-gateway-cache-similarity"] = f"{ctx.cache_similarity:.4f}"
        if ctx.cache_judge is not None:
            headers["x-gateway-cache-judge"] = f"{ctx.cache_judge:.4f}"
        # Why a miss was not a hit: a close candidate a guard refused, or a text the
        # semantic tier does not judge (both a fixed set of words, never the text).
        if ctx.cache_near_miss is not None and not ctx.cache_result.startswith("hit"):
            headers["x-gateway-cache-near-miss"] = ctx.cache_near_miss
        if ctx.cache_exact_only is not None:
            headers["x-gateway-cache-exact-only"] = ctx.cache_exact_only
    if ctx.fallback_model is not None and ctx.degradation_level != 4:
        headers["x-gateway-fallback"] = ctx.fallback_model
    if ctx.attempts > 1:
        headers["x-gateway-attempts"] = str(ctx.attempts)
    if ctx.loop_stop is not None:
        headers["x-gateway-loop-stop"] = ctx.loop_stop
    if ctx.compression is not None:
        headers["x-gateway-compression"] = f"{ctx.compression}; turns={ctx.compressed_turns}"
    if ctx.shed:
        headers["x-gateway-shed"] = ",".join(ctx.shed)
    return headers
