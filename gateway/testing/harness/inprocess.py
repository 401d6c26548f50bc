"""The gateway and the fake upstream in this process, on loopback sockets, served by an event
loop in a background thread: synchronous clients (the OpenAI SDK, urllib) and async ones alike
talk to them over real sockets, and a test can still read the fake's counters directly."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from aiohttp import web

from gateway.config import Settings
from gateway.http.keys import BREAKERS, CACHE, CONNECTIONS
from gateway.observability.accesslog import AccessLog
from gateway.server.app import build_app
from gateway.server.connections import BoundedSite

T = TypeVar("T")


class ServerThread:
    """An event loop in a daemon thread; coroutines are run on it with `call`."""

    def __init__(
        self, loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    ) -> None:
        self.loop = loop_factory()  # uvloop.new_event_loop: the loop `gateway serve` runs
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class GatewayServer:
    """The real gateway application on a free loopback port."""

    def __init__(self, settings: Settings, access_log: AccessLog | None = None) -> None:
        self.settings = settings
        self.app = build_app(settings, access_log)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> GatewayServer:
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        connections = self.app[CONNECTIONS]
        await BoundedSite(self._runner, connections, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def settle_cache(self) -> None:
        """Until the cache's background writes have landed (a test reads the store next)."""
        cache = self.app[CACHE]
        if cache is not None:
            await cache.flush()

    async def fresh_state(self, breakers: bool = True) -> None:
        """The cache emptied after its pending writes (which would otherwise land during the
        next test), and with `breakers` every breaker closed."""
        if breakers:
            for breaker in self.app[BREAKERS]:
                breaker.reset()
        cache = self.app[CACHE]
        if cache is not None:
            await cache.flush()
            await cache.store.purge()


@contextmanager
def running_gateway(
    thread: ServerThread, settings: Settings, access_log: AccessLog | None = None
) -> Iterator[GatewayServer]:
    """A `GatewayServer` on `thread`'s loop until the block ends."""
    server = thread.call(GatewayServer(settings, access_log).start())
    try:
        yield server
    finally:
        thread.call(server.stop())
