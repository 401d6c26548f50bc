"""The load generators against a small server that answers after a delay and counts what it
sees: the closed loop keeps exactly N requests open, the open loop keeps its rate whatever the
latency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from gateway.testing.harness.load import (
    LoadResult,
    Outcome,
    Request,
    closed_loop,
    open_loop,
    session_for,
)


@dataclass
class Slow:
    """Answers POST / after `delay` seconds; status 500 for a body of b"fail"."""

    delay: float
    url: str = ""
    open: int = 0
    most_open: int = 0
    arrivals: list[float] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals.append(time.perf_counter())
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(self.delay)
            body = await request.read()
            return web.Response(status=500 if body == b"fail" else 200, text="done")
        finally:
            self.open -= 1


async def serve(slow: Slow) -> AsyncIterator[Slow]:
    app = web.Application()
    app.router.add_post("/", slow.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    slow.url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        yield slow
    finally:
        await runner.cleanup()


@pytest.fixture
async def slow() -> AsyncIterator[Slow]:
    async for server in serve(Slow(delay=0.2)):
        yield server


async def test_the_closed_loop_keeps_n_open_and_sends_count(slow: Slow) -> None:
    async with session_for(8) as session:
        result = await closed_loop(session, lambda i: Request(slow.url, b"x"), 4, count=20)
    assert result.count == 20 and result.errors == 0
    assert slow.most_open == 4
    # 20 requests, 4 at a time, 0.2 s each: five waves.
    assert 0.9 < result.seconds < 3.0
    assert min(result.latencies_s) >= 0.2
    assert result.summary_ms().count == 20


async def test_failures_and_the_check_count_as_errors(slow: Slow) -> None:
    seen: list[Outcome] = []

    def make(i: int) -> Request:
        return Request(slow.url, b"fail" if i % 2 else b"ok")

    async with session_for(4) as session:
        result = await closed_loop(
            session,
            make,
            2,
            count=6,
            ok=lambda o: o.body == b"done" and o.status == 200,
            observe=seen.append,
        )
    assert (result.count, result.errors) == (3, 3)
    assert sorted(o.status for o in seen) == [200, 200, 200, 500, 500, 500]


async def test_a_request_timeout_is_an_error_not_an_exception(slow: Slow) -> None:
    seen: list[Outcome] = []
    async with session_for(2) as session:
        result = await closed_loop(
            session,
            lambda i: Request(slow.url, b"x", timeout_s=0.05),
            1,
            count=2,
            observe=seen.append,
        )
    assert result.errors == 2 and [o.error for o in seen] == ["timeout", "timeout"]


async def test_the_closed_loop_stops_at_its_duration(slow: Slow) -> None:
    async with session_for(2) as session:
        result = await closed_loop(session, lambda i: Request(slow.url, b"x"), 2, seconds=0.5)
    # Workers start a request only before the deadline; the last ones finish after it.
    assert 4 <= result.count <= 8 and result.seconds < 1.0


async def test_the_open_loop_keeps_its_rate_whatever_the_latency(slow: Slow) -> None:
    async with session_for(0) as session:
        result = await open_loop(session, lambda i: Request(slow.url, b"x"), rate=50, seconds=1.0)
    # 50 requests were due in the second, each answered after 0.2 s: a closed loop of one
    # would have sent 5.
    assert result.count == 50 and result.errors == 0 and result.skipped == 0
    gaps = [b - a for a, b in zip(slow.arrivals, slow.arrivals[1:], strict=False)]
    assert slow.arrivals[-1] - slow.arrivals[0] == pytest.approx(0.98, abs=0.15)
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(0.02, abs=0.01)
    assert slow.most_open >= 8  # ~10 open at once (0.2 s x 50/s)


async def test_the_open_loop_skips_rather_than_pile_up(slow: Slow) -> None:
    async with session_for(0) as session:
        result = await open_loop(
            session, lambda i: Request(slow.url, b"x"), rate=100, seconds=0.5, max_in_flight=3
        )
    assert slow.most_open <= 3
    assert result.skipped > 20 and result.count + result.skipped == 50


async def test_a_paced_closed_loop_keeps_its_rate_with_at_most_n_open(slow: Slow) -> None:
    async with session_for(8) as session:
        result = await closed_loop(session, lambda i: Request(slow.url, b"x"), 8, count=10, rate=20)
    # 8 workers could send 40 a second (0.2 s each); paced, request i leaves at i / 20 s.
    assert result.count == 10 and slow.most_open <= 8
    assert slow.arrivals[-1] - slow.arrivals[0] == pytest.approx(0.45, abs=0.1)


async def test_a_paced_closed_loop_that_falls_behind_sends_at_once(slow: Slow) -> None:
    async with session_for(2) as session:
        result = await closed_loop(session, lambda i: Request(slow.url, b"x"), 2, count=6, rate=100)
    # Due within 0.06 s, but two at a time for 0.2 s each: three waves, never more than two.
    assert result.count == 6 and slow.most_open == 2
    assert 0.5 < result.seconds < 1.5


async def test_think_time_spaces_each_workers_requests(slow: Slow) -> None:
    async with session_for(2) as session:
        result = await closed_loop(
            session, lambda i: Request(slow.url, b"x"), 1, count=3, think_s=0.3
        )
    gaps = [b - a for a, b in zip(slow.arrivals, slow.arrivals[1:], strict=False)]
    # One worker: each gap is the previous answer (0.2 s) plus the pause (0.3 s).
    assert result.count == 3 and all(0.45 < gap < 1.0 for gap in gaps), gaps


def test_a_runs_figures_are_its_count_errors_seconds_and_percentiles_in_ms() -> None:
    run = LoadResult(latencies_s=[0.010, 0.020, 0.030], errors=2, seconds=1.5)
    figures = run.figures()
    assert (figures.count, figures.errors, figures.seconds) == (3, 2, 1.5)
    assert figures.p50_ms == pytest.approx(20.0) and figures.p99_ms == pytest.approx(29.8)
    assert figures.rps == 2.0
