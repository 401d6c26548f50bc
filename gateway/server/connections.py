"""Client connections held to bounds: a header-read timeout, an idle keep-alive timeout and a
cap on open connections.

aiohttp closes a connection that waits too long for its next request (`keepalive_timeout`,
3,630 s unless set: it is our idle timeout here) but has no header-read timeout and no cap:
one client sending its headers a byte at a time, or thousands of idle ones, held a socket
each for an hour. So each connection's protocol is a `BoundedRequestHandler`:

- headers: armed at the first byte of a request while the connection waits for one, cleared
  when the headers are complete; when it fires the client gets a 408 and the connection is
  closed. The idle timer is suspended meanwhile (a request has begun: the connection is not
  idle), and aiohttp re-arms it after the response;
- the cap: a connection past `max_connections` gets a 503 OpenAI error with Retry-After and
  `Connection: close` before its request is read, and is closed; those open are served as
  before. One log line says the cap is reached (then at most one a minute, with the count).

Neither bound touches a request being handled: a long stream the client is reading is never
cut by them (a slow reader is bounded by backpressure: aiohttp pauses the handler's writes).
The body read timeout is the handler's (`gateway/http/body.py`): it applies only while a
handler waits for body bytes.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Any, cast

import orjson
from aiohttp import web
from aiohttp.http_parser import RawRequestMessage
from aiohttp.web_protocol import RequestHandler

from gateway.config.server import ServerConfig
from gateway.errors import GatewayError

log = logging.getLogger("gateway")

REFUSAL_LOG_INTERVAL_SECONDS = 60.0
# A refused connection stays open this long at most after its 503, so the client reads the
# answer (closing with its request unread would reset the connection and lose the 503).
REFUSED_LINGER_SECONDS = 1.0
RETRY_AFTER_SECONDS = 1
HEAD_END = b"\r\n\r\n"
# Open files beside client connections: upstream pools, stores, logs.
OTHER_FILES = 1024


class ClientTooSlow(GatewayError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class TooManyConnections(GatewayError):
    status = 503
    type = "server_error"
    code = "too_many_connections"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float
    idle_timeout: float
    max_connections: int

    @classmethod
    def of(cls, server: ServerConfig) -> ConnectionLimits:
        return cls(
            server.header_timeout_seconds, server.idle_timeout_seconds, server.max_connections
        )


class Connections:
    """Counts the client connections open, admits or refuses new ones, and says so."""

    def __init__(
        self,
        limits: ConnectionLimits,
        on_refused: Callable[[str], None] = lambda reason: None,
        on_timed_out: Callable[[str], None] = lambda phase: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.open = 0
        self._on_refused = on_refused
        self.on_timed_out = on_timed_out
        self._clock = clock
        self._last_log: float | None = None
        self._refused_unlogged = 0

    def admit(self) -> bool:
        if self.open < self.limits.max_connections:
            self.open += 1
            return True
        self._on_refused("max_connections")
        self._refused_unlogged += 1
        now = self._clock()
        if self._last_log is None or now - self._last_log >= REFUSAL_LOG_INTERVAL_SECONDS:
            log.warning(
                "connection cap reached: %d client connections open (server.max_connections); "
                "new ones get 503 until some close (%d refused since the last such line)",
                self.open,
                self._refused_unlogged,
            )
            self._last_log = now
            self._refused_unlogged = 0
        return False

    def closed(self) -> None:
        self.open -= 1


def _raw_error(err: GatewayError, extra: dict[str, str] | None = None) -> bytes:
    """A complete HTTP/1.1 error response, for a connection that has no request to answer."""
    body = orjson.dumps(err.body())
    headers = {
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Connection": "close",
        **(extra or {}),
    }
    head = f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return head.encode("ascii") + b"\r\n" + body


HEADERS_TOO_SLOW = _raw_error(
    ClientTooSlow("The request headers did not arrive in time (server.header_timeout_seconds).")
)
REFUSED = _raw_error(
    TooManyConnections("The gateway holds as many connections as it may; retry shortly."),
    {"Retry-After": str(RETRY_AFTER_SECONDS)},
)


class BoundedRequestHandler(RequestHandler):
    """aiohttp's protocol for one connection, with the header timeout and the cap."""

    __slots__ = (
        "_admitted",
        "_connections",
        "_header_timer",
        "_linger",
        "_refused",
        "_requests_seen",
    )

    def __init__(self, manager: web.Server, *, connections: Connections, **options: Any):
        super().__init__(manager, **options)
        self._connections = connections
        self._admitted = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._requests_seen = 0
        self._refused: asyncio.Transport | None = None  # its 503 sent, closing
        self._linger: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._connections.admit():
            self._admitted = True
            super().connection_made(transport)
            return
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._refused = transport
        transport.write(REFUSED)
        if transport.can_write_eof():
            transport.write_eof()  # the client reads the 503, then closes: we see its EOF
            self._linger = self._loop.call_later(REFUSED_LINGER_SECONDS, transport.close)
        else:  # pragma: no cover - TCP transports can half-close
            transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return  # a refused connection's request: read and dropped
        seen = self._request_count
        self._parse(data)
        if self._request_count != seen:  # the headers of a request are complete
            self._stop_header_timer()
        elif data and self._header_timer is None and self._waiting_for_request():
            self._requests_seen = seen
            self.keep_alive(True)  # suspends the idle timer: a request has begun
            self._header_timer = self._loop.call_later(
                self._connections.limits.header_timeout, self._headers_too_slow
            )

    def _parse(self, data: bytes) -> None:
        """Several requests in one read (a pipeline) are parsed one head at a time: aiohttp
        drops every request of a read when one is malformed, so the good ones before it are
        answered, then the bad one gets its 400 and the connection closes."""
        if data.count(HEAD_END) < 2:
            super().data_received(data)
            return
        start = 0
        while start < len(data) and not self._parse_failed():
            end = data.find(HEAD_END, start)
            end = len(data) if end < 0 else end + len(HEAD_END)
            super().data_received(data[start:end])
            start = end

    def _parse_failed(self) -> bool:
        return bool(self._messages) and not isinstance(self._messages[-1][0], RawRequestMessage)

    def eof_received(self) -> None:
        if self._refused is not None:
            self._refused.close()
            return
        super().eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            if self._linger is not None:
                self._linger.cancel()
            return
        self._admitted = False
        self._stop_header_timer()
        self._connections.closed()
        super().connection_lost(exc)

    def _waiting_for_request(self) -> bool:
        """Between requests: aiohttp's loop awaits the next message (its own idle check), or
        no request has arrived yet (the loop may not have started when the first bytes do)."""
        if self._request_count == 0:
            return True
        return self._waiter is not None and not self._waiter.done()

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._request_count != self._requests_seen or not self._waiting_for_request():
            return
        self._connections.on_timed_out("headers")
        log.debug("client %s too slow sending request headers: closed", self.peername)
        if self.transport is not None:
            self.transport.write(HEADERS_TOO_SLOW)
        self.force_close()

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None


class BoundedSite(web.BaseSite):
    """A TCP site whose connections are `BoundedRequestHandler`s (aiohttp's TCPSite makes
    plain ones); the handler options are the ones the gateway sets, nothing else."""

    def __init__(
        self,
        runner: web.AppRunner,
        connections: Connections,
        host: str,
        port: int,
        *,
        backlog: int = 1024,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._connections = connections
        self._host = host
        self._port = port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        protocol = partial(
            BoundedRequestHandler,
            server,
            connections=self._connections,
            loop=loop,
            keepalive_timeout=self._connections.limits.idle_timeout,
            access_log=None,  # the gateway writes its own (observability/accesslog.py)
        )
        self._server = await loop.create_server(
            protocol, self._host, self._port, backlog=self._backlog
        )


def open_file_problem(max_connections: int) -> str | None:
    """Raise the soft open-file limit when the cap needs it; say so when the hard one is too
    low (past it clients would get connection errors, not the 503)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max_connections + OTHER_FILES
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target >= needed:
        return None
    return (
        f"the open-file limit ({target}) is below server.max_connections ({max_connections}) "
        f"+ {OTHER_FILES}: past about {max(target - OTHER_FILES, 0)} connections clients get "
        "connection errors instead of a 503; raise `ulimit -n` or lower server.max_connections"
    )
