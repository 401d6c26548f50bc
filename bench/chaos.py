"""Chaos: chat completions through the gateway while its primary upstream and its knowledge base
fail, slow down and recover on a timer; what the clients got, and how fast the breakers moved.

    python bench/chaos.py                                  # defaults: 20,000 requests at c=100
    python bench/chaos.py --requests 3000 --period 2       # a shorter run
    python bench/chaos.py --stream-share 0.2 --json chaos.json
    python bench/chaos.py --attempt-timeout 0              # unset: the gateway's default
    python bench/chaos.py --read-timeout 0.8               # the primary's own timeouts.read
    python bench/chaos.py --failing looks-valid            # failing: 200s of the wrong shape

Processes on 127.0.0.1: a primary and a backup fake upstream, a fake retriever (the knowledge
base `docs`) and the gateway. A controller turns the primary healthy -> failing -> healthy ->
slow -> ... (once, after the first cycle, both upstreams down: level 4) and the retriever
healthy -> 503 -> healthy -> slow on its own period; this process sends `--rate` requests a
second (at most `--concurrency` in flight), checks every answer, polls /admin/breakers and
puts each request in the windows it was sent in. docs/BENCHMARKS.md ("Chaos") has the setup
in full and what the figures mean.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))  # chaos_report, beside this file

from chaos_report import Poll, Record, print_report, summarize, transitions

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.fault_windows import Window, run_windows
from gateway.testing.harness.gitrev import checkout_state
from gateway.testing.harness.load import Outcome, Request, closed_loop, send, session_for
from gateway.testing.harness.metrics import by_label, scrape
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.process import Server
from gateway.testing.harness.procstat import cpu_seconds, load_average
from gateway.testing.harness.replies import parse_reply
from gateway.testing.harness.results import save_json
from gateway.testing.harness.starters import (
    FAKE_RETRIEVER,
    FAKE_UPSTREAM,
    ready,
    start_fake_upstream,
    start_gateway,
)
from gateway.testing.harness.sync_http import get_json

Json = dict[str, Any]

MODEL, BACKUP_MODEL, KB = "chat", "backup", "docs"
# The primary's cycle; the outage (both upstreams down) comes once, after the first cycle.
PRIMARY_CYCLE = ("healthy", "failing", "healthy", "slow")
# `--failing looks-valid`: each failing window's 200s that only look valid, in turn (the fake's
# `shape` and `content_type` knobs, gateway/testing/fake_shapes.py; plain and streamed alike).
LOOKS_VALID: tuple[Json, ...] = (
    {"content_type": "text/html"},
    {"shape": "empty_choices"},
    {"shape": "no_message"},
    {"shape": "error_object"},
    {"shape": "not_json"},
)
RETRIEVER_CYCLE = ("healthy", "error", "healthy", "slow")

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
    rate: float = option(300.0, "requests sent per second (0: unpaced)")
    stream_share: float = option(0.0, "fraction streamed (0..1)")
    period: float = option(3.0, "seconds per primary window")
    retriever_period: float = option(2.3, "seconds per retriever window")
    outage_seconds: float = option(1.5, "the one window with both upstreams failing")
    deadline: float = option(2.5, "the model's deadline_seconds")
    slow_ms: float | None = option(None, "primary latency in slow windows (default: deadline+1.5s)")
    slow_kind: str = option("latency", "what slow delays", choices=("latency", "first-byte"))
    failing: str = option(
        "status", "what failing windows answer", choices=("status", "looks-valid")
    )
    read_timeout: float | None = option(None, "the primary's timeouts.read (default: unset, 60 s)")
    attempt_timeout: float | None = option(0.8, "resilience.attempt_timeout_seconds (0: unset)")
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
    fakes = [("primary", FAKE_UPSTREAM), ("backup", FAKE_UPSTREAM), ("retriever", FAKE_RETRIEVER)]
    primary, backup, retriever = (
        stack.enter_context(start_fake_upstream(workdir, name=name, module=module))
        for name, module in fakes
    )
    config = write_config(workdir, gateway_config(opts, primary.url, backup.url, retriever.url))
    admin_key = secrets.token_urlsafe(24)
    gateway = start_gateway(workdir, config, env={"GATEWAY_ADMIN_KEY": admin_key}, timeout=90)
    stack.enter_context(ready(gateway, 90))
    for server in (primary, backup, retriever, gateway):
        print(f"  {server.name}: pid {server.pid}, log {server.log_path}")
    return Setup(primary.url, backup.url, retriever.url, admin_key, gateway)


# --- chaos -----------------------------------------------------------------------------------


class Chaos:
    """Turns the fakes' faults on and off on a timer, and keeps the windows it made."""

    def __init__(self, session: aiohttp.ClientSession, setup: Setup, opts: Options) -> None:
        self.session, self.setup, self.opts = session, setup, opts
        self.windows: list[Window] = []
        self.stop = asyncio.Event()
        self.failures = itertools.cycle(LOOKS_VALID)

    async def configure(self, base: str, knobs: Json) -> None:
        async with self.session.post(base + "/_fake/config", json=knobs) as resp:
            if resp.status != 200:
                raise RuntimeError(f"{base}: HTTP {resp.status}: {await resp.text()}")

    async def apply_primary(self, kind: str) -> None:
        """The knobs of the primary and the backup in a window of this kind."""
        opts = self.opts
        primary: Json = {"latency_ms": opts.primary_latency_ms}
        backup: Json = {"latency_ms": opts.backup_latency_ms}
        failure: Json = {"status": 500}
        if opts.failing == "looks-valid":
            failure = next(self.failures)  # a 200 that is no proper answer
        if kind in ("failing", "outage"):
            primary.update(failure)
        if kind == "slow":
            primary["latency_ms" if opts.slow_kind == "latency" else "first_byte_ms"] = opts.slow_ms
        if kind == "outage":
            backup.update(failure)
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
        if target == "primary":
            schedule, apply = self.primary_schedule(), self.apply_primary
        else:
            period = self.opts.retriever_period
            schedule = itertools.cycle([(kind, period) for kind in RETRIEVER_CYCLE])
            apply = self.apply_retriever
        await run_windows(target, schedule, apply, self.windows, self.stop, started)


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
        summary = summarize(records, seconds, chaos.windows, polls, opts.deadline)
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
    print_report(summary, opts.concurrency, opts.poll_ms)
    anomalies = [asdict(r) for r in records if not r.valid][:200]
    for a in anomalies[:5]:
        print(f"  not answered: {a}")
    if opts.json_out:
        save_json(opts.json_out, options=opts, summary=summary, windows=chaos.windows,
                  breaker_transitions=transitions(polls), anomalies=anomalies)  # fmt: skip
    bad = summary["status_5xx"] + summary["invalid_2xx"] + sum(summary["client_errors"].values())
    return 1 if bad or not summary["gateway_alive_at_end"] else 0


if __name__ == "__main__":
    sys.exit(main())
