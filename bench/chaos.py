"""Chaos: chat completions through the gateway while its primary upstream and its knowledge base
fail, slow down and recover on a timer; what the clients got, and how fast the breakers moved.

    python bench/chaos.py                                  # defaults: 20,000 requests at c=100
    python bench/chaos.py --requests 3000 --period 2       # a shorter run
    python bench/chaos.py --stream-share 0.2 --json chaos.json
    python bench/chaos.py --attempt-timeout 0              # unset: the gateway's default
    python bench/chaos.py --read-timeout 0.8               # the primary's own timeouts.read

Every server is its own process on 127.0.0.1: a primary fake upstream, a backup fake upstream
(healthy, 40 ms), a fake retriever (an HTTP knowledge base) and the gateway (`python -m gateway
serve`). The model `chat` runs on the primary, falls back to the model `backup` (on the backup
upstream) and is grounded in the knowledge base `docs` (0.3 s timeout); each attempt is bounded
by `resilience.attempt_timeout_seconds` (0.8 s against the 2.5 s deadline, so that a slow
primary leaves time for the fallback); the cache is off. A controller turns the primary healthy
-> failing (HTTP 500) -> healthy -> slow (answers after the deadline) -> ..., and once, after
the first cycle, takes both upstreams down for a short outage (level 4). The retriever flaps
healthy -> 503 -> slow (beyond its timeout) on its own period. The load generator is this
process (aiohttp on uvloop, one pooled connection per worker): it sends `--rate` requests per
second (300 by default, so that 20,000 requests span about five chaos cycles; 0 for as fast as
it can), with at most `--concurrency` in flight, so a stalled gateway holds the senders back as
it would real clients. Every response is checked (status, the x-gateway-* headers, a chat
completion with text, or a stream of them ending in [DONE]) and `/admin/breakers` is polled
every 50 ms. Requests are put in the window (the primary's and the retriever's) in which they
were sent. The time to the response headers (for a stream: to its first chunk, which the
gateway has in hand before it sends them) is checked against the deadline, which bounds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import random
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.gitrev import checkout_state
from gateway.testing.harness.load import Outcome, Request, closed_loop, send, session_for
from gateway.testing.harness.metrics import by_label, scrape
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.process import Server
from gateway.testing.harness.procstat import cpu_seconds, load_average
from gateway.testing.harness.replies import parse_reply
from gateway.testing.harness.starters import (
    FAKE_RETRIEVER,
    FAKE_UPSTREAM,
    ready,
    start_fake_upstream,
    start_gateway,
)
from gateway.testing.harness.stats import fmt, median, percentile
from gateway.testing.harness.sync_http import get_json
from gateway.testing.harness.tables import markdown_table

Json = dict[str, Any]

MODEL, BACKUP_MODEL, KB = "chat", "backup", "docs"
PRIMARY_BREAKER, BACKUP_BREAKER, KB_BREAKER = (
    "primary/chat-primary",
    "backup/chat-backup",
    "kb/docs",
)
# The primary's cycle; the outage (both upstreams down) comes once, after the first cycle.
PRIMARY_CYCLE = ("healthy", "failing", "healthy", "slow")
RETRIEVER_CYCLE = ("healthy", "error", "healthy", "slow")
LEVELS = {"1": "grounded", "2": "general knowledge", "3": "retrieval unavailable"}
LEVELS["4"] = "unavailable answer"

# Questions the fake retriever's corpus answers (word overlap well above min_score 0.35: level 1
# when retrieval works), and one it does not (level 2). A ticket number makes each one distinct.
ON_TOPIC = (
    "Can items be returned within 30 days of delivery for a full refund?",
    "Do orders ship within two business days and does express delivery take one day?",
    "Does every device carry a two year warranty covering manufacturing defects?",
    "Is support reachable by email around the clock and by phone on weekdays?",
)
OFF_TOPIC = "Write a short poem about autumn leaves and quiet rivers"
OFF_TOPIC_EVERY = 5


@dataclass
class Options:
    requests: int = option(20_000, "requests to send")
    concurrency: int = option(100, "at most this many in flight")
    rate: float = option(
        300.0,
        "requests sent per second, at most `concurrency` in flight (0: unpaced); "
        "paced so that a run spans several chaos cycles",
    )
    stream_share: float = option(0.0, "fraction streamed (0..1)")
    period: float = option(3.0, "seconds per primary window")
    retriever_period: float = option(2.3, "seconds per retriever window")
    outage_seconds: float = option(1.5, "the one window with both upstreams failing")
    deadline: float = option(2.5, "the model's deadline_seconds")
    slow_ms: float | None = option(None, "primary latency in slow windows (default: deadline+1.5s)")
    slow_kind: str = option(
        "latency",
        "slow windows delay the response headers, or (streams only) the first chunk",
        choices=("latency", "first-byte"),
    )
    read_timeout: float | None = option(None, "the primary's timeouts.read (default: unset, 60 s)")
    attempt_timeout: float | None = option(
        0.8,
        "resilience.attempt_timeout_seconds, one attempt's bound to the first byte (below "
        "the deadline; 0: unset, an attempt may use the rest of it)",
    )
    primary_latency_ms: float = option(20.0)
    backup_latency_ms: float = option(40.0)
    kb_timeout: float = option(0.3, "the knowledge base's timeout_seconds")
    retriever_slow_ms: float = option(600.0, "retriever latency in its slow windows")
    retry_attempts: int = option(2)
    breaker_failures: int = option(5)
    reset_seconds: float = option(2.0)
    poll_ms: float = option(50.0, "how often /admin/breakers is read")
    max_seconds: float = option(300.0, "stop sending after this long, whatever is left")
    seed: int = option(1, "which requests are streamed")
    json_out: Path | None = option(None, "also write the summary and windows here", flag="--json")
    keep: bool = option(False, "keep the servers' logs and config")

    def __post_init__(self) -> None:
        self.slow_ms = self.slow_ms or (self.deadline + 1.5) * 1000
        self.attempt_timeout = self.attempt_timeout or None  # 0: unset


# --- servers ---------------------------------------------------------------------------------


@dataclass
class Setup:
    primary: str  # base URLs (no /v1)
    backup: str
    retriever: str
    admin_key: str
    gateway: Server


def gateway_config(opts: Options, primary: str, backup: str, retriever: str) -> Json:
    breaker = {"failures": opts.breaker_failures, "reset_seconds": opts.reset_seconds}
    retry = {"attempts": opts.retry_attempts, "initial_backoff_ms": 20, "max_backoff_ms": 100}
    resilience: Json = {"retry": retry | {"max_retry_after_seconds": 1}, "breaker": breaker}
    resilience["deadline_seconds"] = opts.deadline
    if opts.attempt_timeout:
        resilience["attempt_timeout_seconds"] = opts.attempt_timeout
    timeouts = {"timeouts": {"read": opts.read_timeout}} if opts.read_timeout else {}
    model = {"deadline_seconds": opts.deadline, "cache": {"enabled": False}}
    kb = {"type": "http", "url": f"{retriever}/search", "timeout_seconds": opts.kb_timeout}
    return {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY"},
        "providers": {
            "primary": {"type": "openai", "base_url": f"{primary}/v1", **timeouts},
            "backup": {"type": "openai", "base_url": f"{backup}/v1"},
        },
        "models": [
            {"name": MODEL, "provider": "primary", "upstream_model": "chat-primary"}
            | {"fallbacks": [BACKUP_MODEL], **model},
            {"name": BACKUP_MODEL, "provider": "backup", "upstream_model": "chat-backup", **model},
        ],
        "resilience": resilience,
        "degradation": {"unavailable": {"mode": "answer", "retry_after_seconds": 2}},
        "knowledge_bases": {KB: kb | {"breaker": breaker, "attach": {"models": [MODEL]}}},
    }


def start_servers(opts: Options, workdir: Path, stack: contextlib.ExitStack) -> Setup:
    primary, backup, retriever = (
        stack.enter_context(start_fake_upstream(workdir, name=name, module=module))
        for name, module in (
            ("primary", FAKE_UPSTREAM),
            ("backup", FAKE_UPSTREAM),
            ("retriever", FAKE_RETRIEVER),
        )
    )
    config = write_config(workdir, gateway_config(opts, primary.url, backup.url, retriever.url))
    admin_key = secrets.token_urlsafe(24)
    gateway = start_gateway(workdir, config, env={"GATEWAY_ADMIN_KEY": admin_key}, timeout=90)
    stack.enter_context(ready(gateway, 90))
    for server in (primary, backup, retriever, gateway):
        print(f"  {server.name}: pid {server.pid}, log {server.log_path}")
    return Setup(primary.url, backup.url, retriever.url, admin_key, gateway)


# --- chaos -----------------------------------------------------------------------------------


@dataclass
class Window:
    target: str  # "primary" or "retriever"
    kind: str
    start: float  # unix time the fault was in force for new requests
    end: float = math.inf


class Chaos:
    """Turns the fakes' faults on and off on a timer, and keeps the windows it made."""

    def __init__(self, session: aiohttp.ClientSession, setup: Setup, opts: Options) -> None:
        self.session, self.setup, self.opts = session, setup, opts
        self.windows: list[Window] = []
        self.stop = asyncio.Event()

    async def configure(self, base: str, knobs: Json) -> None:
        async with self.session.post(base + "/_fake/config", json=knobs) as resp:
            if resp.status != 200:
                raise RuntimeError(f"{base}: HTTP {resp.status}: {await resp.text()}")

    async def apply_primary(self, kind: str) -> None:
        """The knobs of the primary and the backup in a window of this kind."""
        opts = self.opts
        primary: Json = {"latency_ms": opts.primary_latency_ms}
        backup: Json = {"latency_ms": opts.backup_latency_ms}
        if kind in ("failing", "outage"):
            primary["status"] = 500
        if kind == "slow":
            primary["latency_ms" if opts.slow_kind == "latency" else "first_byte_ms"] = opts.slow_ms
        if kind == "outage":
            backup["status"] = 500
        await asyncio.gather(
            self.configure(self.setup.primary, {"defaults": primary}),
            self.configure(self.setup.backup, {"defaults": backup}),
        )

    async def apply_retriever(self, kind: str) -> None:
        slow = self.opts.retriever_slow_ms if kind == "slow" else 0
        await self.configure(
            self.setup.retriever, {"status": 503 if kind == "error" else None, "latency_ms": slow}
        )

    def primary_schedule(self) -> itertools.chain[tuple[str, float]]:
        cycle = [(kind, self.opts.period) for kind in PRIMARY_CYCLE]
        once = [("healthy", self.opts.period), ("outage", self.opts.outage_seconds)]
        return itertools.chain(cycle, once, itertools.cycle(cycle))

    async def run(self, target: str, started: asyncio.Event | None = None) -> None:
        """Windows back to back; one ends when the next one's fault is in force."""
        if target == "primary":
            schedule, apply = self.primary_schedule(), self.apply_primary
        else:
            period = self.opts.retriever_period
            schedule = itertools.cycle([(kind, period) for kind in RETRIEVER_CYCLE])
            apply = self.apply_retriever
        current: Window | None = None
        for kind, seconds in schedule:
            await apply(kind)
            now = time.time()
            if current is not None:
                current.end = now
            current = Window(target, kind, now)
            self.windows.append(current)
            if started is not None:
                started.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), seconds)
            if self.stop.is_set():
                break
        if current is not None:
            current.end = time.time()

    def of(self, target: str) -> list[Window]:
        return [w for w in self.windows if w.target == target]


@dataclass
class Poll:
    t: float
    states: dict[str, tuple[str, float | None]]  # breaker -> (state, opened_at)


async def poll_breakers(
    session: aiohttp.ClientSession, setup: Setup, interval: float, polls: list[Poll], stop: Any
) -> int:
    """Breaker states every `interval` seconds until `stop`; returns how many polls failed."""
    auth = {"Authorization": f"Bearer {setup.admin_key}"}
    failed = 0
    while not stop.is_set():
        sent = time.time()
        try:
            async with session.get(setup.gateway.url + "/admin/breakers", headers=auth) as resp:
                data = await resp.json()
            states = {b["name"]: (b["state"], b["opened_at"]) for b in data["breakers"]}
            polls.append(Poll((sent + time.time()) / 2, states))
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError):
            failed += 1
        await asyncio.sleep(max(0.0, interval - (time.time() - sent)))
    return failed


# --- load ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    i: int
    start: float  # unix time sent
    latency: float  # seconds to the last byte
    headers: float  # seconds to the response headers (a stream's first chunk is in hand then)
    stream: bool
    status: int = 0  # 0: no HTTP answer (see error)
    valid: bool = False
    level: str | None = None
    degraded: str | None = None
    fallback: str | None = None
    attempts: int = 1  # x-gateway-attempts; 1 when absent
    attempts_header: bool = False
    error: str | None = None  # client-side: timeout, connection error
    detail: str | None = None  # the start of a body that was not a valid answer


def chat_request(url: str, i: int, stream: bool) -> Request:
    off_topic = i % OFF_TOPIC_EVERY == OFF_TOPIC_EVERY - 1
    text = f"{OFF_TOPIC}, variation {i}" if off_topic else f"{ON_TOPIC[i % 4]} (ticket {i})"
    body: Json = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    return Request(url, json.dumps(body | ({"stream": True} if stream else {})).encode())


def record_of(outcome: Outcome, stream: bool) -> Record:
    """What the client got, checked: status, headers, and a valid completion or stream."""
    sent = time.time() - (time.perf_counter() - outcome.started)
    headers = outcome.first_byte_s or math.nan
    record = Record(outcome.index, sent, outcome.latency_s, headers, stream)
    record.error = "client_timeout" if outcome.error == "timeout" else outcome.error
    if outcome.error is not None:
        return record  # no (whole) answer: status 0
    record.status, h = outcome.status, outcome.headers
    record.level, record.degraded = h.get("x-gateway-level"), h.get("x-gateway-degraded")
    record.fallback = h.get("x-gateway-fallback")
    attempts = h.get("x-gateway-attempts")
    record.attempts_header = attempts is not None
    attempts = attempts or "1"
    record.attempts = int(attempts) if attempts.isdigit() else -1  # -1: malformed
    reply = parse_reply(outcome.body, stream)
    ok_body = reply.valid_stream if stream else reply.valid_completion
    record.valid = 200 <= outcome.status < 300 and ok_body
    if not record.valid:
        record.detail = outcome.body[:300].decode(errors="replace")
    return record


async def run_load(
    session: aiohttp.ClientSession, url: str, opts: Options, streamed: list[bool]
) -> tuple[list[Record], float]:
    records: list[Record] = []
    report_every = max(1, opts.requests // 10)
    t0 = time.monotonic()

    def observe(outcome: Outcome) -> None:
        records.append(record_of(outcome, streamed[outcome.index]))
        if len(records) % report_every == 0:
            print(f"  {len(records):6d} done, {time.monotonic() - t0:5.1f} s", flush=True)

    def make(i: int) -> Request:
        return chat_request(url, i, streamed[i])

    run = await closed_loop(
        session, make, opts.concurrency, count=opts.requests, seconds=opts.max_seconds,
        observe=observe, rate=opts.rate,
    )  # fmt: skip
    return records, run.seconds


async def check_setup(session: aiohttp.ClientSession, url: str) -> None:
    """Before any chaos: an on-topic question is grounded (level 1) on the primary, an
    off-topic one is level 2; otherwise the windows would not mean what they say."""
    for i, level in ((0, "1"), (OFF_TOPIC_EVERY - 1, "2")):
        record = record_of(await send(session, chat_request(url, i, i > 0), i), i > 0)
        if not record.valid or record.level != level or record.fallback:
            raise RuntimeError(f"setup check failed (expected level {level}): {record}")


# --- analysis --------------------------------------------------------------------------------


def window_kind(windows: list[Window], t: float) -> str:
    return next((w.kind for w in windows if w.start <= t < w.end), "outside")


def state_at(polls: list[Poll], name: str, t: float) -> str:
    """The breaker's state in the last poll before `t` (closed before it existed)."""
    state = "closed"
    for poll in itertools.takewhile(lambda p: p.t <= t, polls):
        state = poll.states.get(name, ("closed", None))[0]
    return state


def first_poll(polls: list[Poll], name: str, start: float, end: float, state: str) -> Poll | None:
    matching = (p for p in polls if start <= p.t <= end)
    return next((p for p in matching if p.states.get(name, ("closed",))[0] == state), None)


@dataclass
class Timing:
    """Breaker reaction or recovery times over the windows of one kind."""

    breaker: str
    event: str
    seconds: list[float] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # why a window was not measured


def reactions(
    windows: list[Window], polls: list[Poll], breaker: str, kind: str, grace: float
) -> Timing:
    """From the start of each `kind` window to the breaker open; windows where the breaker
    was not closed at the start are skipped, as are those where it never opened."""
    timing = Timing(breaker, f"opens after {kind} starts")
    for k, w in enumerate(windows):
        if w.kind != kind or not math.isfinite(w.end):
            continue
        if state_at(polls, breaker, w.start) != "closed":
            timing.skipped["not closed at start"] += 1
            continue
        # An opening is this window's doing until the next fault starts.
        later = [v.start for v in windows[k + 1 :] if v.kind != "healthy"]
        poll = first_poll(polls, breaker, w.start, min([w.end + grace, *later[:1]]), "open")
        if poll is None:
            timing.skipped["never opened"] += 1
            continue
        opened_at = poll.states[breaker][1]
        # opened_at is exact; the poll only bounds it (it re-opens no sooner than reset_seconds)
        at = opened_at if opened_at is not None and opened_at >= w.start - 0.05 else poll.t
        timing.seconds.append(max(0.0, at - w.start))
    return timing


def recoveries(windows: list[Window], polls: list[Poll], breaker: str, after: str) -> Timing:
    """From the start of each healthy window that follows an `after` window to the breaker
    closed; skipped when it was already closed then, or did not close within the window."""
    timing = Timing(breaker, f"closes after healthy follows {after}")
    for before, w in itertools.pairwise(windows):
        if w.kind != "healthy" or before.kind != after or not math.isfinite(w.end):
            continue
        if state_at(polls, breaker, w.start) == "closed":
            timing.skipped["closed at start"] += 1
            continue
        poll = first_poll(polls, breaker, w.start, w.end, "closed")
        if poll is None:
            timing.skipped["not closed within the window"] += 1
            continue
        timing.seconds.append(poll.t - w.start)
    return timing


def transitions(polls: list[Poll]) -> list[Json]:
    """State changes seen by the poller, per breaker."""
    out: list[Json] = []
    last: dict[str, str] = {}
    for poll in polls:
        for name, (state, _) in poll.states.items():
            if last.get(name, "closed") != state:
                out.append({"t": poll.t, "breaker": name, "state": state})
                last[name] = state
    return out


def share(rs: list[Record], test: Any) -> float:
    return sum(1 for r in rs if test(r)) / len(rs) if rs else math.nan


def group_stats(rs: list[Record]) -> Json:
    if not rs:
        return {"requests": 0}
    lat = [r.latency for r in rs]
    return {
        "requests": len(rs),
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": max(lat) * 1000,
        "fallback_share": share(rs, lambda r: r.fallback),
        "level4_share": share(rs, lambda r: r.level == "4"),
        "answered_share": share(rs, lambda r: r.valid),
    }


def after_outage(windows: list[Window], records: list[Record]) -> Json | None:
    """Once both upstreams are back: how long level-4 answers go on (breakers still open)."""
    for before, w in itertools.pairwise(windows):
        if before.kind == "outage" and w.kind == "healthy":
            sent = [r for r in records if w.start <= r.start < w.end]
            done = [r.start + r.latency - w.start for r in sent if r.valid and r.level != "4"]
            first = min(done) if done else math.nan
            level4 = [r.start - w.start for r in sent if r.level == "4"]
            return {
                "level4_answers": len(level4),
                "first_model_answer_s": first,
                "level4_sent_after_first_model_answer": sum(1 for t in level4 if t > first),
            }
    return None


def deadline_check(answered: list[Record], deadline: float) -> Json:
    """The deadline bounds the time to the first byte: for a plain answer, its headers; for a
    stream, its headers too (sent with the first chunk). The slack is the client's and the
    gateway's own time on a loaded loop."""
    heads = [r.headers for r in answered]
    return {
        "deadline_s": deadline,
        "max_headers_s": max(heads, default=math.nan),
        "max_plain_latency_s": max((r.latency for r in answered if not r.stream), default=math.nan),
        "max_latency_s": max((r.latency for r in answered), default=math.nan),
        **{
            f"headers_over_deadline{suffix}": sum(1 for h in heads if h > deadline + extra)
            for suffix, extra in (("", 0), ("_plus_100ms", 0.1), ("_plus_250ms", 0.25))
        },
    }


def counts(values: Any) -> dict[str, int]:
    return {str(k): v for k, v in sorted(Counter(values).items())}


def summarize(records: list[Record], seconds: float, chaos: Chaos, polls: list[Poll]) -> Json:
    opts, total = chaos.opts, len(records)
    primary_windows, retriever_windows = chaos.of("primary"), chaos.of("retriever")
    statuses = Counter(r.status for r in records)
    answered = [r for r in records if r.valid]
    levels = Counter(r.level or "none" for r in records)
    level4 = [r for r in records if r.level == "4"]
    summary: Json = {
        "requests": total,
        "streamed": sum(r.stream for r in records),
        "seconds": seconds,
        "rps": total / seconds if seconds else math.nan,
        "answered": len(answered),
        "answered_share": len(answered) / total if total else math.nan,
        "answered_by_a_model": sum(1 for r in answered if r.level != "4"),
        "deadline_check": deadline_check(answered, opts.deadline),
        "status_5xx": sum(n for s, n in statuses.items() if s >= 500),
        "other_non_2xx": sum(n for s, n in statuses.items() if s and not 200 <= s < 300),
        "invalid_2xx": sum(1 for r in records if 200 <= r.status < 300 and not r.valid),
        "client_errors": dict(Counter(r.error for r in records if r.error)),
        "statuses": counts(r.status for r in records),
        "fallbacks": sum(1 for r in records if r.fallback),
        "retried": sum(1 for r in records if r.attempts > 1),
        # x-gateway-attempts counts calls that went out (not those an open breaker refused)
        "attempts": counts(r.attempts for r in records),
        # Upstream calls the headers account for: the header's count, else 1 for an answer by
        # a model (one call answered) and 0 for level 4 (0 or 1 call: unknown).
        "calls_by_header": sum(
            r.attempts if r.attempts_header else int(r.valid and r.level != "4") for r in records
        ),
        "level4_without_header": sum(1 for r in level4 if not r.attempts_header),
        # Level-4 answers by x-gateway-attempts ("-": no header, 0 or 1 call)
        "level4_by_attempts": dict(
            Counter(str(r.attempts) if r.attempts_header else "-" for r in level4)
        ),
        "levels": {k: levels[k] for k in ("1", "2", "3", "4", "none") if levels[k]},
        "degraded": dict(Counter(r.degraded for r in records if r.degraded)),
    }
    latency: Json = {}
    for kind in ("healthy", "failing", "slow", "outage", "outside"):
        rs = [r for r in records if window_kind(primary_windows, r.start) == kind]
        if rs:
            windows = sum(1 for w in primary_windows if w.kind == kind)
            latency[kind] = {"windows": windows, **group_stats(rs)}
            # The same, without the retriever's faults: requests sent while it was healthy.
            calm = [r.latency for r in rs if window_kind(retriever_windows, r.start) == "healthy"]
            latency[kind]["kb_healthy_p50_ms"] = percentile(calm, 50) * 1000
            latency[kind]["kb_healthy_p99_ms"] = percentile(calm, 99) * 1000
    healthy = latency.get("healthy", {})
    for kind in ("failing", "slow"):
        if kind in latency and healthy:
            for p in ("p50_ms", "p99_ms", "kb_healthy_p50_ms", "kb_healthy_p99_ms"):
                latency[kind][f"{p.removesuffix('_ms')}_vs_healthy"] = latency[kind][p] / healthy[p]
    summary["latency_by_primary_window"] = latency
    t0 = min(w.start for w in chaos.windows)
    summary["each_window"] = [
        {"target": w.target, "kind": w.kind, "from_s": w.start - t0, "to_s": w.end - t0}
        | group_stats([r for r in records if w.start <= r.start < w.end])
        for w in chaos.windows
    ]
    summary["after_outage"] = after_outage(primary_windows, records)
    retrieval: dict[str, Counter[str]] = {}
    for r in records:
        kind = window_kind(retriever_windows, r.start)
        retrieval.setdefault(kind, Counter())[r.level or "none"] += 1
    summary["levels_by_retriever_window"] = {k: dict(v) for k, v in retrieval.items()}
    grace = opts.deadline + 0.5
    timings = [
        reactions(primary_windows, polls, PRIMARY_BREAKER, "failing", grace),
        reactions(primary_windows, polls, PRIMARY_BREAKER, "slow", grace),
        recoveries(primary_windows, polls, PRIMARY_BREAKER, "failing"),
        recoveries(primary_windows, polls, PRIMARY_BREAKER, "slow"),
        reactions(primary_windows, polls, BACKUP_BREAKER, "outage", grace),
        recoveries(primary_windows, polls, BACKUP_BREAKER, "outage"),
        reactions(retriever_windows, polls, KB_BREAKER, "error", grace),
        reactions(retriever_windows, polls, KB_BREAKER, "slow", grace),
        recoveries(retriever_windows, polls, KB_BREAKER, "error"),
        recoveries(retriever_windows, polls, KB_BREAKER, "slow"),
    ]
    summary["breakers"] = [
        {
            "breaker": t.breaker,
            "event": t.event,
            "n": len(t.seconds),
            "median_s": median(t.seconds),
            "max_s": max(t.seconds, default=math.nan),
            "seconds": [round(s, 3) for s in t.seconds],
            "skipped": dict(t.skipped),
        }
        for t in timings
    ]
    gaps = [b.t - a.t for a, b in itertools.pairwise(polls)]
    summary["polls"] = {
        "count": len(polls),
        "gap_median_ms": median(gaps) * 1000,
        "gap_max_ms": max(gaps, default=math.nan) * 1000,
    }
    targets = ("primary", "retriever")
    summary["windows"] = {t: dict(Counter(w.kind for w in chaos.of(t))) for t in targets}
    return summary


def print_report(s: Json, opts: Options) -> None:
    total, levels, d = s["requests"], s["levels"], s["deadline_check"]

    def pct(key: str) -> str:
        return f"{s[key]} ({100 * s[key] / total:.2f} %)" if total else "-"

    print(
        f"\n{total} requests ({s['streamed']} streamed) at c={opts.concurrency} "
        f"in {s['seconds']:.1f} s: {s['rps']:.0f} req/s\n"
    )
    rows: list[tuple[str, object]] = [
        ("answered (2xx, valid chat completion, any level)", pct("answered")),
        ("... by a model (levels 1-3)", pct("answered_by_a_model")),
        ("5xx responses (target 0)", s["status_5xx"]),
        ("other non-2xx responses", s["other_non_2xx"] - s["status_5xx"]),
        ("2xx with an invalid body", s["invalid_2xx"]),
        ("no response (client timeout / connection error)", sum(s["client_errors"].values())),
        ("answered by the fallback model", pct("fallbacks")),
        ("more than one attempt (x-gateway-attempts > 1)", pct("retried")),
        (
            f"max time to headers / plain latency, answered (deadline {d['deadline_s']:g} s)",
            f"{d['max_headers_s']:.3f} s / {d['max_plain_latency_s']:.3f} s",
        ),
        (
            "answered with headers after the deadline (+0 / +100 / +250 ms)",
            " / ".join(
                str(d[f"headers_over_deadline{x}"]) for x in ("", "_plus_100ms", "_plus_250ms")
            ),
        ),
    ]
    for level, name in LEVELS.items():
        n = levels.get(level, 0)
        rows.append((f"level {level} ({name})", f"{n} ({100 * n / total:.2f} %)" if total else "-"))
    if levels.get("none"):
        rows.append(("no x-gateway-level header", levels["none"]))
    print(markdown_table(("measure", "value"), rows))

    print("\nLatency by the primary's window (requests by when they were sent):\n")
    head = ("window", "windows", "requests", "p50 ms", "p99 ms", "max ms", "p50 / healthy")
    head += ("p99 / healthy", "retriever healthy too: p50 ms", "p99 ms", "p50 / healthy")
    head += ("p99 / healthy", "fallback", "level 4")
    nan = math.nan
    table = [
        (
            kind,
            row["windows"],
            row["requests"],
            *(fmt(row[k], ".1f") for k in ("p50_ms", "p99_ms")),
            fmt(row["max_ms"], ".0f"),
            *(fmt(row.get(f"{k}_vs_healthy", nan)) for k in ("p50", "p99")),
            *(fmt(row[k], ".1f") for k in ("kb_healthy_p50_ms", "kb_healthy_p99_ms")),
            *(fmt(row.get(f"kb_healthy_{k}_vs_healthy", nan)) for k in ("p50", "p99")),
            f"{100 * row['fallback_share']:.1f} %",
            f"{100 * row['level4_share']:.1f} %",
        )
        for kind, row in s["latency_by_primary_window"].items()
    ]
    print(markdown_table(head, table))

    print("\nLevels by the retriever's window:\n")
    head = ("retriever", "requests", "level 1", "level 2", "level 3", "level 4")
    by_window = s["levels_by_retriever_window"].items()
    table = [(k, sum(c.values()), *(c.get(level, 0) for level in "1234")) for k, c in by_window]
    print(markdown_table(head, table))

    polls = s["polls"]
    print(
        f"\nCircuit breakers (polled every {opts.poll_ms:.0f} ms: median gap "
        f"{fmt(polls['gap_median_ms'], '.0f')} ms, max {fmt(polls['gap_max_ms'], '.0f')}"
        " ms; open times from the breaker's own opened_at):\n"
    )
    head = ("breaker", "event", "n", "median s", "max s", "skipped")
    table = []
    for b in s["breakers"]:
        skipped = ", ".join(f"{n} {why}" for why, n in b["skipped"].items()) or "-"
        table.append(
            (b["breaker"], b["event"], b["n"], fmt(b["median_s"]), fmt(b["max_s"]), skipped)
        )
    print(markdown_table(head, table))
    outage = s["after_outage"]
    if outage:
        print(
            f"\nAfter the outage: first model answer {fmt(outage['first_model_answer_s'], '.2f')}"
            f" s into the healthy window; {outage['level4_answers']} level-4 answers to requests"
            f" sent in it, {outage['level4_sent_after_first_model_answer']} of them sent later"
        )
    print("\nEach window (t from the first window's start):")
    for w in s["each_window"]:
        line = f"  {w['target']:9} {w['kind']:8} {w['from_s']:6.1f}-{w['to_s']:6.1f} s"
        if w["requests"]:
            line += (
                f"  n={w['requests']:5}  p50 {w['p50_ms']:7.1f}  p99 {w['p99_ms']:7.1f} ms"
                f"  fallback {100 * w['fallback_share']:5.1f} %"
                f"  level 4 {100 * w['level4_share']:5.1f} %"
            )
        print(line)
    if s["client_errors"]:
        print(f"\nclient errors: {s['client_errors']}")
    print(
        f"statuses: {s['statuses']}; x-gateway-degraded: {s['degraded']}; "
        f"x-gateway-attempts: {s['attempts']}; calls by header {s['calls_by_header']} "
        f"(+ up to {s['level4_without_header']} level-4 answers without it)"
    )
    print(
        f"gateway CPU {s['gateway_cpu_ms_per_request']:.2f} ms/request; upstream calls "
        f"{s['upstream_requests']}; gateway log {s['gateway_log']}; failed polls "
        f"{s['failed_polls']}"
    )
    print(
        f"upstream failures (gateway metrics): {s['upstream_failures']}; level-4 answers by "
        f"x-gateway-attempts: {s['level4_by_attempts']}"
    )


# --- main ------------------------------------------------------------------------------------


async def bench(setup: Setup, opts: Options) -> tuple[list[Record], float, Chaos, list[Poll], int]:
    rng = random.Random(opts.seed)
    streamed = [rng.random() < opts.stream_share for _ in range(opts.requests)]
    url = setup.gateway.url + "/v1/chat/completions"
    # A request that outlives its deadline by this much is a hang, not a slow answer.
    async with (
        session_for(opts.concurrency, timeout_s=opts.deadline + 15) as load,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as control,
    ):
        chaos = Chaos(control, setup, opts)
        await asyncio.gather(chaos.apply_primary("healthy"), chaos.apply_retriever("healthy"))
        await check_setup(load, url)
        polls: list[Poll] = []
        poll_stop = asyncio.Event()
        interval = opts.poll_ms / 1000
        poller = asyncio.create_task(poll_breakers(control, setup, interval, polls, poll_stop))
        started = asyncio.Event()
        primary = asyncio.create_task(chaos.run("primary", started))
        retriever = asyncio.create_task(chaos.run("retriever"))
        await started.wait()
        try:
            records, seconds = await run_load(load, url, opts, streamed)
        finally:
            chaos.stop.set()
            await asyncio.gather(primary, retriever)
            poll_stop.set()
            failed_polls = await poller
            await asyncio.gather(chaos.apply_primary("healthy"), chaos.apply_retriever("healthy"))
    return records, seconds, chaos, polls, failed_polls


def upstream_failures(gateway: str) -> Json:
    """gateway_upstream_failures_total from /metrics: "deployment reason" -> count."""
    try:
        found = scrape(gateway, "gateway_upstream_failures_total", timeout=5)
    except (OSError, RuntimeError) as exc:
        return {"unavailable": str(exc)}
    return by_label(found, "deployment", "reason")


def log_problems(text: str) -> Json:
    """What the gateway's log says went wrong on its side (tracebacks, internal errors)."""
    return {
        "lines": text.count("\n"),
        "tracebacks": text.count("Traceback (most recent call last)"),
        "internal_errors": len(re.findall(r"unhandled|internal error", text, re.IGNORECASE)),
        "breaker_transitions_logged": len(re.findall(r"circuit breaker .*->", text)),
        "kb_unavailable_warnings": text.count("unavailable:"),
        "kb_failures_suppressed": sum(
            int(n) for n in re.findall(r"\((\d+) more failures since the last warning\)", text)
        ),
    }


def measure(opts: Options, workdir: Path) -> tuple[Json, list[Record], Chaos, list[Poll]]:
    with contextlib.ExitStack() as servers:
        setup = start_servers(opts, workdir, servers)
        cpu_before = cpu_seconds(setup.gateway.pid)
        records, seconds, chaos, polls, failed_polls = uvloop.run(bench(setup, opts))
        gateway_cpu = cpu_seconds(setup.gateway.pid) - cpu_before
        summary = summarize(records, seconds, chaos, polls)
        summary["failed_polls"] = failed_polls
        summary["gateway_cpu_ms_per_request"] = gateway_cpu * 1000 / max(1, len(records))
        summary["gateway_alive_at_end"] = setup.gateway.running
        summary["upstream_requests"] = {
            name: get_json(url + "/_fake/stats", timeout=5)["requests"]
            for name, url in (("primary", setup.primary), ("backup", setup.backup))
        }
        summary["upstream_failures"] = upstream_failures(setup.gateway.url)
    summary["gateway_log"] = log_problems(setup.gateway.output())
    return summary, records, chaos, polls


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    attempt = f"{opts.attempt_timeout:g} s" if opts.attempt_timeout else "unset"
    print(
        f"chaos bench: {opts.requests} requests at c={opts.concurrency}, "
        f"{f'{opts.rate:g} req/s' if opts.rate else 'unpaced'}, stream share "
        f"{opts.stream_share:g}; primary windows {opts.period:g} s "
        f"({' -> '.join(PRIMARY_CYCLE)}, one {opts.outage_seconds:g} s outage), retriever "
        f"windows {opts.retriever_period:g} s ({' -> '.join(RETRIEVER_CYCLE)}); deadline "
        f"{opts.deadline:g} s, attempt timeout {attempt}, primary read "
        f"timeout {f'{opts.read_timeout:g} s' if opts.read_timeout else 'unset'}"
    )
    try:
        code = checkout_state("gateway")
    except (OSError, subprocess.CalledProcessError):
        code = "this checkout"
    print(f"  code measured: {code}; {os.cpu_count()} cpus, load average {load_average()}")
    wall = time.monotonic()
    if opts.keep:
        workdir = tempfile.mkdtemp(prefix="chaos-bench-")
        print(f"  logs and config kept in {workdir}")
        summary, records, chaos, polls = measure(opts, Path(workdir))
    else:
        with tempfile.TemporaryDirectory(prefix="chaos-bench-") as workdir:
            summary, records, chaos, polls = measure(opts, Path(workdir))
    print(f"\ndone in {time.monotonic() - wall:.0f} s; load average {load_average()}")
    print_report(summary, opts)
    anomalies = [asdict(r) for r in records if not r.valid][:200]
    for a in anomalies[:5]:
        print(f"  not answered: {a}")
    if opts.json_out:
        windows = [asdict(w) for w in chaos.windows]
        data = {"options": {k: str(v) for k, v in asdict(opts).items()}, "summary": summary}
        data |= {"windows": windows, "breaker_transitions": transitions(polls)}
        opts.json_out.write_text(json.dumps(data | {"anomalies": anomalies}, indent=1))
    bad = summary["status_5xx"] + summary["invalid_2xx"] + sum(summary["client_errors"].values())
    return 1 if bad or not summary["gateway_alive_at_end"] else 0


if __name__ == "__main__":
    sys.exit(main())
