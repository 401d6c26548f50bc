"""Graceful shutdown (SIGTERM): stop being ready, stop accepting, let requests finish.

readiness turns false (/readyz 503 "draining") -> wait `drain_seconds` for the balancer
-> stop accepting connections; idle keep-alive connections close
-> requests in flight finish, up to `shutdown_timeout_seconds`
-> streams still running then end with an SSE error event and [DONE], never cut silently
-> pending cache writes are flushed, connections closed, exit
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.errors import GatewayError

# Ahead of aiohttp's own cancellation at the timeout, which closes the connection at once
# and would leave no chance to end a stream properly.
EXPIRY_MARGIN_SECONDS = 0.25


@dataclass(slots=True)
class Drain:
    draining: bool = False  # SIGTERM received: not ready any more
    expired: bool = False  # the shutdown timeout is up: running streams are being ended
    streams: set[asyncio.Task[object]] = field(default_factory=set)  # relaying now

    def expire(self) -> None:
        """End every stream still relaying: each writes the shutdown error event and [DONE]."""
        self.expired = True
        for task in self.streams:
            task.cancel()


class ShuttingDown(GatewayError):
    status = 503
    type = "server_error"
    code = "server_shutting_down"

    def __init__(self) -> None:
        super().__init__(
            "The gateway is shutting down and could not finish this stream; retry the request."
        )
