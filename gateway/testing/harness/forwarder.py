"""A bare aiohttp forwarder: the baseline of what any aiohttp-based proxy costs.

It relays POST /v1/chat/completions bytes to the upstream with one shared ClientSession and
sends the answer back as is, chunk by chunk for event streams. No parsing, validation, logging
or metrics: whatever the gateway costs beyond this is the gateway's own work.

    python -m gateway.testing.harness.forwarder --upstream http://127.0.0.1:9000/v1 --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

UPSTREAM = web.AppKey("upstream", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)
# Same pool size as the gateway's default provider max_connections, so neither is pool-bound.
POOL_SIZE = 100


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    session = request.app[SESSION]
    async with session.post(
        request.app[UPSTREAM] + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    ) as upstream:
        content_type = upstream.headers.get("Content-Type", "application/json")
        if not content_type.startswith("text/event-stream"):
            return web.Response(
                body=await upstream.read(),
                status=upstream.status,
                headers={"Content-Type": content_type},
            )
        response = web.StreamResponse(
            status=upstream.status, headers={"Content-Type": content_type}
        )
        await response.prepare(request)
        async for piece in upstream.content.iter_any():
            await response.write(piece)
        await response.write_eof()
        return response


async def _session_lifetime(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
    app[SESSION] = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())
    yield
    await app[SESSION].close()


def build_app(upstream: str) -> web.Application:
    app = web.Application()
    app[UPSTREAM] = upstream.rstrip("/")
    app.cleanup_ctx.append(_session_lifetime)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


async def serve(upstream: str, host: str, port: int) -> None:
    runner = web.AppRunner(build_app(upstream), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    for address in runner.addresses:
        print(f"forwarder listening on http://{address[0]}:{address[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description="A bare aiohttp forwarder (benchmark baseline).")
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9000/v1")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    import uvloop  # the gateway's own loop, so neither side of the comparison has an edge

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.upstream, args.host, args.port))


if __name__ == "__main__":
    main()
