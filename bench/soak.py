"""Soak: one gateway process (SQLite cache with a small max_entries, so it is full after the
first window and evicts from then on; routing alias `auto`, tool guard, two tenants) at a steady
load, sampled every window for anything that grows when it should not.

    python bench/soak.py                      # 3 minutes
    python bench/soak.py --minutes 30 --rate 60
    python bench/soak.py --json soak.json     # also save every window

The load is open-loop, `--rate` a second (at most 256 in flight, more are counted as skipped):
80 % new questions (a miss and a write each), 15 % recent repeats (hits), 30 % streamed, 10 %
with tools, 2 % of clients giving up after 50 ms on an answer the fake delays by 400 ms.
Beside it, `--slow-clients` connections send request headers a byte at a time and as many sit
idle, at all times (each one closed by the gateway is replaced): the gateway must close them
(header timeout 2 s here, idle 20 s: above the load's 15 s keep-alive pool) in every window
while the load is served as before. Each window: requests, errors, latency p50/p99, the
gateway's CPU per request, slow and idle clients closed; at its end RSS, open fds, threads,
cache entries, and from a probe thread inside the gateway
(gateway/testing/harness/inner_probe.py) the asyncio tasks and the length of every container
of the cache store. Targets (exit status 1 when one is missed): entries never above
max_entries and no store container over it by 5 %; RSS growth since the cache filled under
max(8 MB, 5 %); fds within +5 and tasks within +20 of the start; p50 at most 1.5x and p99 at
most 2x the start; no errors; slow and idle clients closed by the gateway in every window.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import tempfile
from collections import Counter, deque
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.gateways import embedder_loaded
from gateway.testing.harness.inner_probe import probe_env, read_probe
from gateway.testing.harness.load import LoadResult, Outcome, Request, open_loop, session_for
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.process import Server
from gateway.testing.harness.procstat import cpu_seconds, load_average, open_files, rss_mb, threads
from gateway.testing.harness.prompts import UniqueQuestions
from gateway.testing.harness.results import save_json
from gateway.testing.harness.starters import listening, spawn_gateway, start_fake_upstream
from gateway.testing.harness.stats import fmt, percentile
from gateway.testing.harness.sync_http import get_json, post_json
from gateway.testing.harness.tables import markdown_table

ADMIN_KEY = "soak-bench-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TENANT_KEYS = {"soak-a": "sk-soak-a-0123456789", "soak-b": "sk-soak-b-0123456789"}
MAX_IN_FLIGHT = 256
LOOKUP = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": LOOKUP}}]


@dataclass(frozen=True)
class Options:
    minutes: float = option(3.0, "measured minutes")
    rate: float = option(40.0, "requests per second")
    max_entries: int = option(1000, "the cache store's max_entries")
    embedder: str = option("minilm", "the cache's embedder", choices=("minilm", "hash"))
    window: float = option(30.0, "seconds per sample")
    warmup: float = option(15.0, "seconds of load before the first sample")
    latency_ms: float = option(20.0, "the fake upstream's latency")
    seed: int = option(1, "the request mix")
    slow_clients: int = option(20, "connections dribbling headers, and as many idle, at all times")
    json_out: Path | None = option(None, "also write every window here", flag="--json")


@dataclass
class Window:
    index: int
    start: float  # seconds since the measured part began
    requests: int = 0
    errors: int = 0
    abandoned: int = 0  # clients that gave up on purpose
    skipped: int = 0  # over MAX_IN_FLIGHT
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    cpu_ms_per_request: float = math.nan
    rss_mb: float = math.nan
    fds: int = 0
    threads: int = 0
    tasks: int | None = None
    top_tasks: dict[str, int] = field(default_factory=dict)
    entries: int = 0
    store: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    load: str = ""
    dribblers_closed: int = 0  # slow clients the gateway closed (header timeout)
    idle_closed: int = 0  # idle connections the gateway closed (idle timeout)
    slow_connect_failures: int = 0  # slow or idle clients that could not connect


# --- the processes ----------------------------------------------------------------------------


def gateway_config(fake: str, opts: Options) -> dict[str, Any]:
    store = {"type": "sqlite", "path": "cache/cache.sqlite3", "max_entries": opts.max_entries}
    tiers = [{"model": "small", "max_score": 0.5}, {"model": "large"}]
    keys = [{"env": f"SOAK_KEY_{n}", "tenant": t} for n, t in enumerate(TENANT_KEYS)]
    timeouts = {"connect": 2, "read": 10, "total": 30}
    return {
        "server": {
            "host": "127.0.0.1",
            "port": 0,
            "access_log": False,
            "header_timeout_seconds": 2,
            "idle_timeout_seconds": 20,  # above the load generator's keep-alive (15 s)
        },
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY", "keys": keys},
        "providers": {"fake": {"type": "openai", "base_url": f"{fake}/v1", "timeouts": timeouts}},
        "models": [
            {"name": "small", "provider": "fake", "upstream_model": "small-up"},
            {"name": "large", "provider": "fake", "upstream_model": "large-up"},
        ],
        "routing": {"aliases": {"auto": {"tiers": tiers, "escalate": {"tools": 1}}}},
        "cache": {
            "store": store,
            "embedder": {"type": "hash"} if opts.embedder == "hash" else {},
            "defaults": {"enabled": True},
        },
        "guard": {"tools": {"enabled": True}},
    }


def start(stack: ExitStack, workdir: Path, opts: Options) -> tuple[Server, Path]:
    """The fake and the gateway (with the probe), stopped with `stack`; the gateway and the
    file its probe writes."""
    fake = stack.enter_context(start_fake_upstream(workdir))
    post_json(fake.url + "/_fake/config", {"defaults": {"latency_ms": opts.latency_ms}})
    probe_out = workdir / "probe.json"
    env = {**probe_env(workdir, probe_out), "GATEWAY_ADMIN_KEY": ADMIN_KEY}
    env |= {f"SOAK_KEY_{n}": key for n, key in enumerate(TENANT_KEYS.values())}
    config = write_config(workdir, gateway_config(fake.url, opts), name="gateway.yaml")
    gateway = stack.enter_context(listening(spawn_gateway(workdir, config, env=env), 120))
    return embedder_loaded(gateway, 600), probe_out


def process_state(pid: int, probe_out: Path) -> dict[str, Any]:
    fds, probe = open_files(pid), read_probe(probe_out)
    return {"rss_mb": rss_mb(pid), "fds": fds, "threads": threads(pid), "probe": probe}


# --- the load ---------------------------------------------------------------------------------


class SlowClients:
    """`n` connections dribbling request headers (a byte every 0.2 s) and `n` idle ones, each
    replaced when the gateway closes it; counts the closures since the last `take`."""

    def __init__(self, base: str, n: int) -> None:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.host, self.port, self.n = host, int(port), n
        self.closed: Counter[str] = Counter()

    def take(self) -> dict[str, int]:
        out = {"dribblers_closed": self.closed["dribbler"], "idle_closed": self.closed["idle"]}
        out["slow_connect_failures"] = self.closed["connect_failed"]
        self.closed.clear()
        return out

    async def run(self) -> None:
        kinds = ["dribbler"] * self.n + ["idle"] * self.n
        async with asyncio.TaskGroup() as group:  # cancelled: every connection closes
            for kind in kinds:
                group.create_task(self._keep_one(kind))

    async def _keep_one(self, kind: str) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:  # the listen backlog full for a moment: try again
                self.closed["connect_failed"] += 1
                await asyncio.sleep(0.1)
                continue
            dripping = None
            if kind == "dribbler":
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
                dripping = asyncio.get_running_loop().create_task(self._drip(writer))
            try:
                while await reader.read(65536):  # the 408, if any, then the gateway's close
                    pass
            except OSError:
                pass
            finally:
                if dripping is not None:
                    dripping.cancel()
                writer.close()
            self.closed[kind] += 1

    @staticmethod
    async def _drip(writer: asyncio.StreamWriter) -> None:
        while not writer.is_closing():
            writer.write(b"a")
            await asyncio.sleep(0.2)


class Traffic:
    """The request mix, and what came back since the last `take`."""

    def __init__(self, base: str, seed: int) -> None:
        self.url = base + "/v1/chat/completions"
        self.rng = random.Random(seed)
        self.recent: deque[str] = deque(maxlen=400)
        template = "Soak question {n}: what do {words} have in common?"
        self.questions = UniqueQuestions(seed, template, words=7, vocabulary=180)
        self._reset()

    def _reset(self) -> None:
        self.errors = self.abandoned = 0
        self.cache: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()

    def take(self, run: LoadResult) -> dict[str, Any]:
        """What `run` (one window's load) measured, and reset the counts."""
        out = {"errors": self.errors, "abandoned": self.abandoned, "skipped": run.skipped}
        out["requests"] = sum(self.statuses.values()) + self.abandoned
        out["p50_ms"] = percentile(run.latencies_s, 50) * 1000
        out["p99_ms"] = percentile(run.latencies_s, 99) * 1000
        out |= {"cache": dict(self.cache), "statuses": dict(self.statuses)}
        self._reset()
        return out

    def make(self, _: int) -> Request:
        rng = self.rng
        if self.recent and rng.random() < 0.15:
            question = rng.choice(self.recent)
        else:
            question = self.questions.next()
            self.recent.append(question)
        body: dict[str, Any] = {
            "model": "auto" if rng.random() < 0.7 else "small",
            "messages": [{"role": "user", "content": question}],
            "temperature": 0.2,
        }
        if rng.random() < 0.3:
            body["stream"] = True
        if rng.random() < 0.1:
            body["tools"] = TOOLS
        give_up = None
        if rng.random() < 0.02:  # a client that leaves before the answer
            body["fake"] = {"latency_ms": 400}
            give_up = 0.05
        key = rng.choice(list(TENANT_KEYS.values()))
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        return Request(self.url, json.dumps(body).encode(), headers, timeout_s=give_up or 60)

    def observe(self, outcome: Outcome) -> None:
        if outcome.error == "timeout" and outcome.request.timeout_s != 60:
            self.abandoned += 1
            return
        status = str(outcome.status) if outcome.error is None else outcome.error
        self.statuses[status] += 1
        if status == "200":
            self.cache[outcome.headers.get("x-gateway-cache", "-")] += 1
        else:
            self.errors += 1


async def soak(opts: Options, gateway: Server, probe_out: Path) -> tuple[list[Window], Any]:
    base, pid = gateway.url, gateway.pid
    await asyncio.sleep(2.5)  # the probe has written once
    before = process_state(pid, probe_out)
    traffic = Traffic(base, opts.seed)
    slow = SlowClients(base, opts.slow_clients)
    slow_task = asyncio.get_running_loop().create_task(slow.run())
    windows: list[Window] = []
    async with session_for(0) as session:

        async def load(seconds: float) -> LoadResult:
            return await open_loop(
                session, traffic.make, opts.rate, seconds, max_in_flight=MAX_IN_FLIGHT,
                observe=traffic.observe,
            )  # fmt: skip

        print(f"warm-up {opts.warmup:.0f} s at {opts.rate:g} req/s", flush=True)
        traffic.take(await load(opts.warmup))
        slow.take()
        for i in range(max(1, round(opts.minutes * 60 / opts.window))):
            cpu0 = cpu_seconds(pid)
            measured = traffic.take(await load(opts.window)) | slow.take()
            cpu_ms = (cpu_seconds(pid) - cpu0) * 1000 / max(1, measured["requests"])
            stats = await asyncio.to_thread(get_json, base + "/admin/cache/stats", ADMIN)
            state = process_state(pid, probe_out)
            probe = state.pop("probe")
            w = Window(i + 1, i * opts.window, **measured, cpu_ms_per_request=cpu_ms, **state)
            w.tasks, w.top_tasks = probe.get("tasks"), probe.get("top_tasks") or {}
            w.entries, w.store = int(stats.get("entries", 0)), probe.get("store") or {}
            w.load = load_average()
            windows.append(w)
            print(row(w), flush=True)
    slow_task.cancel()
    await asyncio.sleep(2.5)  # in-flight work settles; the probe writes once more
    errors = probe_out.with_name("probe.json.error")
    idle = {"before": before, **process_state(pid, probe_out)}
    idle["probe_errors"] = errors.read_text() if errors.exists() else ""
    return windows, idle


# --- the report -------------------------------------------------------------------------------

HEADER = (
    f"{'window':>6} {'t (s)':>6} {'req':>6} {'err':>4} {'p50 ms':>7} {'p99 ms':>8}"
    f" {'cpu ms/req':>10} {'RSS MB':>7} {'fds':>4} {'thr':>4} {'tasks':>5} {'entries':>7}"
    f" {'hit%':>5}  load"
)


def row(w: Window) -> str:
    hits = w.cache.get("hit-exact", 0) + w.cache.get("hit-semantic", 0)
    total = sum(w.cache.values())
    return (
        f"{w.index:>6} {w.start:>6.0f} {w.requests:>6} {w.errors:>4} {fmt(w.p50_ms, '7.1f')}"
        f" {fmt(w.p99_ms, '8.1f')} {fmt(w.cpu_ms_per_request, '10.2f')} {w.rss_mb:>7.1f}"
        f" {w.fds:>4} {w.threads:>4} {'-' if w.tasks is None else w.tasks:>5} {w.entries:>7}"
        f" {100 * hits / total if total else 0:>5.1f}  {w.load}"
    )


def drift(start: float, end: float) -> float | None:
    return round(end / start, 2) if start else None


def within(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


def verdict(windows: list[Window], idle: dict[str, Any], opts: Options) -> dict[str, Any]:
    first, last = windows[0], windows[-1]
    store = last.store or idle["probe"].get("store") or {}
    over = {name: size for name, size in store.items() if size > opts.max_entries * 1.05}
    checks: dict[str, Any] = {
        "entries_within_max": all(w.entries <= opts.max_entries for w in windows),
        "store_containers_over_max_entries": over,
        "store_containers_bounded": not over and bool(last.store),
    }
    full = next((w for w in windows if w.entries >= opts.max_entries), None)
    if full is None:
        checks["rss_bounded"] = False
        checks["rss_note"] = "the cache never filled: raise --minutes or --rate"
    else:
        growth, allowed = last.rss_mb - full.rss_mb, max(8.0, 0.05 * full.rss_mb)
        checks["rss_growth_since_full_mb"] = round(growth, 1)
        checks["rss_allowed_mb"] = round(allowed, 1)
        checks["rss_bounded"] = growth <= allowed
        if last.index > full.index:
            slope = growth / ((last.start - full.start) / 60)
            checks["rss_slope_mb_per_min"] = round(slope, 2)
    checks["fd_drift"] = last.fds - first.fds
    checks["fds_stable"] = checks["fd_drift"] <= 5
    checks["fds_idle_before_after"] = (idle["before"]["fds"], idle["fds"])
    before, after = idle["before"].get("probe") or {}, idle.get("probe") or {}
    if first.tasks is not None and last.tasks is not None:
        checks["task_drift"] = last.tasks - first.tasks
        checks["tasks_stable"] = checks["task_drift"] <= 20
        checks["tasks_idle_before_after"] = (before.get("tasks"), after.get("tasks"))
        checks["top_tasks_idle_after"] = after.get("top_tasks")
    else:
        checks["tasks_stable"] = None
        checks["task_note"] = "the probe did not report (see probe_errors)"
    checks["p50_drift"] = drift(first.p50_ms, last.p50_ms)
    checks["p99_drift"] = drift(first.p99_ms, last.p99_ms)
    checks["latency_stable"] = within(checks["p50_drift"], 1.5) and within(checks["p99_drift"], 2)
    if opts.slow_clients:
        closed = [(w.dribblers_closed, w.idle_closed) for w in windows]
        checks["slow_and_idle_closed_per_window"] = closed
        checks["slow_clients_bounded"] = all(d > 0 and i > 0 for d, i in closed)
    checks["errors"] = sum(w.errors for w in windows)
    checks["no_errors"] = checks["errors"] == 0
    # Every yes/no check is a target (tasks_stable is None when the probe did not report).
    checks["met"] = all(value for value in checks.values() if isinstance(value, bool))
    return checks


def run(opts: Options) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gateway-soak-") as tmp, ExitStack() as stack:
        gateway, probe_out = start(stack, Path(tmp), opts)
        windows, idle = uvloop.run(soak(opts, gateway, probe_out))
    return {"windows": windows, "idle": idle, "checks": verdict(windows, idle, opts)}


# The start-to-end table: (name, Window attribute, format).
DRIFTS = (
    ("RSS (MB)", "rss_mb", ".1f"),
    ("open fds", "fds", ".0f"),
    ("threads", "threads", ".0f"),
    ("asyncio tasks (probe)", "tasks", ".0f"),
    ("cache entries", "entries", ".0f"),
    ("latency p50 (ms)", "p50_ms", ".1f"),
    ("latency p99 (ms)", "p99_ms", ".1f"),
    ("cpu ms/request", "cpu_ms_per_request", ".2f"),
)


def number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def idle_line(when: str, state: dict[str, Any]) -> str:
    tasks = (state["probe"] or {}).get("tasks")
    return (
        f"idle {when}: RSS {state['rss_mb']:.1f} MB, fds {state['fds']},"
        f" threads {state['threads']}, tasks {tasks}"
    )


def summary(result: dict[str, Any], opts: Options) -> str:
    windows: list[Window] = result["windows"]
    first, last = windows[0], windows[-1]
    rows = []
    for name, attr, spec in DRIFTS:
        a, b = (number(getattr(w, attr)) for w in (first, last))
        rows.append((name, fmt(a, spec), fmt(b, spec), fmt(b - a, "+" + spec)))
    lines = [
        "",
        markdown_table(("", "start", "end", "drift"), rows),
        "",
        f"cache store containers at the end (max_entries {opts.max_entries}):",
        "  " + ", ".join(f"{k}={v}" for k, v in sorted(last.store.items())),
        f"asyncio tasks at the end: {last.top_tasks}",
        idle_line("before the load", result["idle"]["before"]),
        idle_line("after the load (2.5 s)", result["idle"]),
        "",
        "checks:",
        *(f"  {k}: {v}" for k, v in result["checks"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    print(
        f"soak: {opts.minutes:g} min at {opts.rate:g} req/s, max_entries {opts.max_entries},"
        f" embedder {opts.embedder}, windows of {opts.window:g} s, load {load_average()}",
        flush=True,
    )
    print(HEADER, flush=True)
    result = run(opts)
    print(summary(result, opts))
    if opts.json_out is not None:
        save_json(opts.json_out, options=opts, **result)
        print(f"\nwritten: {opts.json_out}")
    return 0 if result["checks"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
