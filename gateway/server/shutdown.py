"""Graceful shutdown (SIGTERM): stop being ready, stop accepting, let requests finish.

readiness turns false (/readyz 503 "draining") -> wait `drain_seconds` for the balancer
-> stop accepting connections; idle keep-alive connections close
-> requests in flight finish, up to `shutdown_timeout_seconds`
-> every request still running then answers, never cut silently: a stream (started or still
   waiting for its upstream's first byte) ends with an SSE error event
   (`server_shutting_down`) and its end ([DONE]), a plain request gets a 503 with Retry-After
-> pending cache writes are flushed, connections closed, exit

The timeout is spent once, here (`Drain.ending`): at the timeout every request still running is
ended and answers; ANSWER_SECONDS later any that could not (a client not reading) is cut.
aiohttp's own shutdown wait is set longer, so it never acts first: at its timeout it would
cut the connections without an answer, then wait that timeout a second time for the
handlers. The process exits within drain + timeout + EXIT_WITHIN_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.errors import GatewayError

# After the timeout: how long the requests it ended have to write their answers before their
# connections are cut (a client not reading is the only thing that takes longer).
ANSWER_SECONDS = 0.25
# The promise (tests/server/test_shutdown.py holds it): SIGTERM -> exit within drain + timeout +
# this; docs/DEPLOY.md derives the orchestrator's grace period from it.
EXIT_WITHIN_SECONDS = 1.0
RETRY_AFTER_SECONDS = 1  # another replica (behind the same balancer) can take the retry now


@dataclass(slots=True)
class Drain:
    draining: bool = False  # SIGTERM received: not ready any more
    expired: bool = False  # the shutdown timeout is up: requests still running are ended
    requests: set[asyncio.Task[object]] = field(default_factory=set)  # being answered now
    _ended: set[asyncio.Task[object]] = field(default_factory=set)  # cancelled by expire()

    def enter(self) -> asyncio.Task[object] | None:
        """Count the running request (its handler task) in until `leave`."""
        task = asyncio.current_task()
        if task is not None:
            self.requests.add(task)
        return task

    def leave(self, task: asyncio.Task[object] | None) -> None:
        if task is not None:
            self.requests.discard(task)

    async def settle(self, seconds: float) -> None:
        """Return once no request is running, or after `seconds`."""
        deadline = time.monotonic() + seconds
        while self.requests and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(set(self.requests), timeout=left)

    async def begin(self, drain_seconds: float) -> None:
        """Not ready any more, so the balancer stops sending; then `drain_seconds` for it to
        notice, before the caller stops accepting connections."""
        self.draining = True
        print(f"gateway draining: {len(self.requests)} requests in flight", flush=True)
        await asyncio.sleep(drain_seconds)

    @contextlib.asynccontextmanager
    async def ending(self, timeout_seconds: float) -> AsyncIterator[None]:
        """Around the server's own shutdown (stop accepting, wait for the requests in flight):
        at `timeout_seconds` the requests still running are ended and answer."""
        ender = asyncio.create_task(self._end_after(timeout_seconds))
        try:
            yield
        finally:
            ender.cancel()

    async def _end_after(self, timeout_seconds: float) -> None:
        await asyncio.sleep(timeout_seconds)
        if self.requests:
            print(
                f"gateway shutdown timeout ({timeout_seconds:g} s): ending "
                f"{len(self.requests)} requests in flight with server_shutting_down",
                flush=True,
            )
        self.expire()
        await self.settle(ANSWER_SECONDS)
        self.cut()

    def expire(self) -> None:
        """End every request still running: each catches the cancellation (`ended`) and
        answers with ShuttingDown."""
        self.expired = True
        for task in self.requests:
            self._ended.add(task)
            task.cancel()

    def cut(self) -> None:
        """Cancel what is still running after its answer had its time: aiohttp then closes
        those connections."""
        self._ended.clear()
        for task in self.requests:
            task.cancel()

    def ended(self, task: asyncio.Task[object] | None) -> bool:
        """Whether `task`'s cancellation is the shutdown's (not a client that left): then it
        is taken back, so the request can still write its answer."""
        if task is None or task not in self._ended:
            return False
        self._ended.discard(task)
        task.uncancel()
        return True


class ShuttingDown(GatewayError):
    status = 503
    type = "server_error"
    code = "server_shutting_down"

    def __init__(
        self,
        message: str = "The gateway is shutting down and could not finish this request; retry it.",
    ) -> None:
        super().__init__(message, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def server_timeout(timeout_seconds: float) -> float:
    """aiohttp's own shutdown timeout (`AppRunner(shutdown_timeout=...)`): past ours and the
    answers' time, so that it never acts first."""
    return timeout_seconds + 2 * ANSWER_SECONDS
