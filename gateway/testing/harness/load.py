"""Load generators over aiohttp: closed loop (N workers, each sending its next request when the
last one is read) and open loop (requests started at a fixed rate whatever the answers).

Both take a function that makes request number `i`, read every answer in full, and return a
`LoadResult`: the latency of each answer that passed `ok`, the number that did not, and how
long the run took. `observe` sees every `Outcome` as it completes (status, headers, body and
times), for counts a benchmark keeps of its own (cache hits, answering replica, ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.testing.harness.stats import Summary

JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=lambda: JSON_HEADERS)
    timeout_s: float | None = None  # this request's own total timeout (a client that gives up)


@dataclass
class Outcome:
    index: int
    request: Request
    started: float  # perf_counter when sent
    status: int = 0  # 0: no HTTP answer (see `error`)
    headers: CIMultiDictProxy[str] = field(default_factory=lambda: CIMultiDictProxy(CIMultiDict()))
    body: bytes = b""
    first_byte_s: float = 0.0  # until the response headers
    latency_s: float = 0.0  # until the body was read in full (or the failure)
    error: str | None = None  # "timeout" or the aiohttp exception's class name


Check = Callable[[Outcome], bool]
Observer = Callable[[Outcome], None]


def status_200(outcome: Outcome) -> bool:
    return outcome.status == 200


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)  # answers that passed the check
    errors: int = 0  # answers that did not (or never came)
    skipped: int = 0  # open loop: not sent, `max_in_flight` requests were still open
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return len(self.latencies_s)

    @property
    def rps(self) -> float:
        """Answers that passed, per second of the run."""
        return self.count / self.seconds if self.seconds else 0.0

    def summary_ms(self) -> Summary:
        return Summary.of([s * 1000 for s in self.latencies_s])

    def figures(self) -> RunFigures:
        summary = self.summary_ms()
        return RunFigures(self.count, self.errors, self.seconds, summary.p50, summary.p99)


@dataclass
class RunFigures:
    """A run as a report (and --json) keeps it; a benchmark's sample adds its own fields."""

    count: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


MakeRequest = Callable[[int], Request]


async def send(session: aiohttp.ClientSession, request: Request, index: int = 0) -> Outcome:
    """One request, its answer read in full; transport failures and timeouts are recorded in
    the outcome, not raised."""
    outcome = Outcome(index, request, time.perf_counter())
    timeout = aiohttp.ClientTimeout(total=request.timeout_s) if request.timeout_s else None
    try:
        async with session.post(
            request.url,
            data=request.body,
            headers=request.headers,
            timeout=timeout or session.timeout,  # None would lift the session's timeout
        ) as resp:
            outcome.first_byte_s = time.perf_counter() - outcome.started
            outcome.status, outcome.headers = resp.status, resp.headers
            outcome.body = await resp.read()
    except TimeoutError:
        outcome.error = "timeout"
    except aiohttp.ClientError as exc:
        outcome.error = type(exc).__name__
    outcome.latency_s = time.perf_counter() - outcome.started
    return outcome


class _Recorder:
    def __init__(self, ok: Check, observe: Observer | None) -> None:
        self.result = LoadResult()
        self._ok, self._observe = ok, observe

    def record(self, outcome: Outcome) -> None:
        if outcome.error is None and self._ok(outcome):
            self.result.latencies_s.append(outcome.latency_s)
        else:
            self.result.errors += 1
        if self._observe is not None:
            self._observe(outcome)


async def closed_loop(
    session: aiohttp.ClientSession,
    make: MakeRequest,
    concurrency: int,
    *,
    count: int | None = None,
    seconds: float | None = None,
    stop: asyncio.Event | None = None,
    ok: Check = status_200,
    observe: Observer | None = None,
    rate: float = 0.0,
    think_s: float = 0.0,
) -> LoadResult:
    """`concurrency` workers until `count` requests were sent, `seconds` passed or `stop` is
    set, whichever comes first (at least one of the three must be given). With a `rate`,
    request `i` is not sent before start + i / `rate`, and a worker that is late sends at once:
    paced, but never more than `concurrency` in flight (clients with a pool that size). With
    `think_s`, each worker waits that long before each request: sparse traffic, which finds
    nothing warm."""
    if count is None and seconds is None and stop is None:
        raise ValueError("closed_loop needs a count, a duration or a stop event")
    recorder = _Recorder(ok, observe)
    deadline = time.perf_counter() + seconds if seconds is not None else float("inf")
    issued = 0

    def more() -> bool:
        within = (count is None or issued < count) and time.perf_counter() < deadline
        return within and not (stop is not None and stop.is_set())

    async def worker() -> None:
        nonlocal issued
        while more():
            index, issued = issued, issued + 1
            if rate:
                await asyncio.sleep(started + index / rate - time.perf_counter())
            if think_s:
                await asyncio.sleep(think_s)
            recorder.record(await send(session, make(index), index))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    recorder.result.seconds = time.perf_counter() - started
    return recorder.result


async def open_loop(
    session: aiohttp.ClientSession,
    make: MakeRequest,
    rate: float,
    seconds: float,
    *,
    max_in_flight: int = 256,
    ok: Check = status_200,
    observe: Observer | None = None,
) -> LoadResult:
    """Request `i` is sent at start + i / `rate` for `seconds`, whether or not earlier ones
    were answered; one that finds `max_in_flight` requests open is skipped (counted), so a
    stalled server is not buried under a backlog. Returns once every sent request is done."""
    recorder = _Recorder(ok, observe)
    in_flight: set[asyncio.Task[None]] = set()

    async def one(index: int) -> None:
        recorder.record(await send(session, make(index), index))

    started = time.perf_counter()
    index = 0
    while (due := index / rate) < seconds:
        delay = started + due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(in_flight) >= max_in_flight:
            recorder.result.skipped += 1
        else:
            task = asyncio.create_task(one(index))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        index += 1
    if in_flight:
        await asyncio.gather(*in_flight)
    recorder.result.seconds = time.perf_counter() - started
    return recorder.result


def session_for(concurrency: int, timeout_s: float = 60.0) -> aiohttp.ClientSession:
    """A client session with a pool of `concurrency` connections (0: unbounded) and no
    cookies, as a load generator wants it."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
