"""Soak: one gateway process at a steady load for a bounded time, the cache filling up and
evicting, sampled every 30 s for anything that grows when it should not.

    python bench/soak.py                      # 3 minutes
    python bench/soak.py --minutes 30 --rate 60
    python bench/soak.py --json soak.json     # also save every window

Processes (free loopback ports, a temporary directory): the fake upstream
(gateway/testing/fake_upstream.py, 20 ms per answer) and one gateway (`python -m gateway
serve`): SQLite cache store with a small `max_entries` (1,000 by default) so it is full after
the first window and evicts from then on, the embedder (MiniLM by default, `--embedder hash`),
the routing alias `auto`, the tool guard, two tenants.

The load is open-loop: `--rate` requests a second whatever the latency (at most 256 in flight;
any request that would exceed that is counted as skipped). Mix: 80 % new questions (a miss and
a cache write each: the store grows, then evicts), 15 % repeats of recent questions (hits),
30 % streamed, 10 % with tools (the fake hallucinates no tools here: calls are valid), and 2 %
of clients that give up after 50 ms on an answer the fake delays by 400 ms (the gateway must
release the upstream request and its connection).

Each 30 s window: requests, errors, latency p50/p99 (successful requests), the gateway's CPU
per request, and at the window's end its resident memory (/proc/<pid>/status VmRSS), open file
descriptors (/proc/<pid>/fd), threads, cache entries (/admin/cache/stats), and two things the
gateway does not expose, read by a probe thread in the gateway process
(gateway/testing/harness/inner_probe.py, loaded by a `sitecustomize` on its PYTHONPATH): the
asyncio tasks not done, with the most common coroutines, and the length of every container
attribute of the cache store object, to compare with max_entries.

Targets (the exit status is 1 when one is missed):
  - cache entries never above max_entries, and no container of the store longer than
    max_entries + 5 % (its bookkeeping is bounded by the cache's configured size);
  - resident memory: from the first window with a full cache to the end, growth under
    max(8 MB, 5 %);
  - file descriptors and asyncio tasks: the end within +5 and +20 of the start (nothing
    leaks per request);
  - latency drift: p50 at the end at most 1.5x the start, p99 at most 2x.
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
from gateway.testing.harness.results import save_json
from gateway.testing.harness.starters import listening, spawn_gateway, start_fake_upstream
from gateway.testing.harness.stats import fmt, percentile
from gateway.testing.harness.sync_http import get_json, post_json

ADMIN_KEY = "soak-bench-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TENANT_KEYS = {"soak-a": "sk-soak-a-0123456789", "soak-b": "sk-soak-b-0123456789"}
MAX_IN_FLIGHT = 256
WORDS = [
    a + b + c
    for a in ("ka", "lo", "mi", "ne", "ru", "sa")
    for b in ("ti", "vo", "ze", "pa", "do")
    for c in ("fe", "gi", "hu", "ja", "ko", "lu")
]
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
    json_out: Path | None = option(None, "also write every window here", flag="--json")
    quiet: bool = option(False, cli=False)


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


# --- the processes ----------------------------------------------------------------------------


def gateway_config(fake: str, opts: Options) -> dict[str, Any]:
    store = {"type": "sqlite", "path": "cache/cache.sqlite3", "max_entries": opts.max_entries}
    tiers = [{"model": "small", "max_score": 0.5}, {"model": "large"}]
    keys = [{"env": f"SOAK_KEY_{n}", "tenant": t} for n, t in enumerate(TENANT_KEYS)]
    timeouts = {"connect": 2, "read": 10, "total": 30}
    return {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
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


class Traffic:
    """The request mix, and what came back since the last `take`."""

    def __init__(self, base: str, seed: int) -> None:
        self.url = base + "/v1/chat/completions"
        self.rng = random.Random(seed)
        self.recent: deque[str] = deque(maxlen=400)
        self.n = 0
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
            self.n += 1
            words = " ".join(rng.choices(WORDS, k=7))
            question = f"Soak question {self.n}: what do {words} have in common?"
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
    windows: list[Window] = []
    async with session_for(0) as session:

        async def load(seconds: float) -> LoadResult:
            return await open_loop(
                session, traffic.make, opts.rate, seconds, max_in_flight=MAX_IN_FLIGHT,
                observe=traffic.observe,
            )  # fmt: skip

        say(opts, f"warm-up {opts.warmup:.0f} s at {opts.rate:g} req/s")
        traffic.take(await load(opts.warmup))
        for i in range(max(1, round(opts.minutes * 60 / opts.window))):
            cpu0 = cpu_seconds(pid)
            measured = traffic.take(await load(opts.window))
            cpu_ms = (cpu_seconds(pid) - cpu0) * 1000 / max(1, measured["requests"])
            stats = await asyncio.to_thread(get_json, base + "/admin/cache/stats", ADMIN)
            state = process_state(pid, probe_out)
            probe = state.pop("probe")
            w = Window(i + 1, i * opts.window, **measured, cpu_ms_per_request=cpu_ms, **state)
            w.tasks, w.top_tasks = probe.get("tasks"), probe.get("top_tasks") or {}
            w.entries, w.store = int(stats.get("entries", 0)), probe.get("store") or {}
            w.load = load_average()
            windows.append(w)
            say(opts, row(w))
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


def verdict(windows: list[Window], idle: dict[str, Any], opts: Options) -> dict[str, Any]:
    first, last = windows[0], windows[-1]
    full = next((w for w in windows if w.entries >= opts.max_entries), None)
    checks: dict[str, Any] = {}
    checks["entries_within_max"] = all(w.entries <= opts.max_entries for w in windows)
    bound = opts.max_entries * 1.05
    over = {
        name: size
        for name, size in (last.store or idle["probe"].get("store") or {}).items()
        if size > bound
    }
    checks["store_containers_over_max_entries"] = over
    checks["store_containers_bounded"] = not over and bool(last.store)
    if full is not None:
        growth = last.rss_mb - full.rss_mb
        allowed = max(8.0, 0.05 * full.rss_mb)
        checks["rss_growth_since_full_mb"] = round(growth, 1)
        checks["rss_allowed_mb"] = round(allowed, 1)
        checks["rss_bounded"] = growth <= allowed
        after = [w for w in windows if w.index >= full.index]
        if len(after) >= 2:
            minutes = (after[-1].start - after[0].start) / 60
            checks["rss_slope_mb_per_min"] = round(
                (after[-1].rss_mb - after[0].rss_mb) / minutes, 2
            )
    else:
        checks["rss_bounded"] = False
        checks["rss_note"] = "the cache never filled: raise --minutes or --rate"
    checks["fd_drift"] = last.fds - first.fds
    checks["fds_stable"] = checks["fd_drift"] <= 5
    checks["fds_idle_before_after"] = (idle["before"]["fds"], idle["fds"])
    if first.tasks is not None and last.tasks is not None:
        checks["task_drift"] = last.tasks - first.tasks
        checks["tasks_stable"] = checks["task_drift"] <= 20
        checks["tasks_idle_before_after"] = (
            (idle["before"].get("probe") or {}).get("tasks"),
            (idle.get("probe") or {}).get("tasks"),
        )
        checks["top_tasks_idle_after"] = (idle.get("probe") or {}).get("top_tasks")
    else:
        checks["tasks_stable"] = None
        checks["task_note"] = "the probe did not report (see probe_errors)"
    checks["p50_drift"] = round(last.p50_ms / first.p50_ms, 2) if first.p50_ms else None
    checks["p99_drift"] = round(last.p99_ms / first.p99_ms, 2) if first.p99_ms else None
    checks["latency_stable"] = bool(
        checks["p50_drift"] is not None
        and checks["p50_drift"] <= 1.5
        and checks["p99_drift"] is not None
        and checks["p99_drift"] <= 2.0
    )
    checks["errors"] = sum(w.errors for w in windows)
    checks["no_errors"] = checks["errors"] == 0
    keys = [
        "entries_within_max",
        "store_containers_bounded",
        "rss_bounded",
        "fds_stable",
        "tasks_stable",
        "latency_stable",
        "no_errors",
    ]
    checks["met"] = all(checks[k] is not False for k in keys)
    return checks


def say(opts: Options, text: str) -> None:
    if not opts.quiet:
        print(text, flush=True)


def run(opts: Options) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gateway-soak-") as tmp, ExitStack() as stack:
        gateway, probe_out = start(stack, Path(tmp), opts)
        windows, idle = uvloop.run(soak(opts, gateway, probe_out))
    return {"windows": windows, "idle": idle, "checks": verdict(windows, idle, opts)}


def summary(result: dict[str, Any], opts: Options) -> str:
    windows: list[Window] = result["windows"]
    first, last = windows[0], windows[-1]
    lines = [
        "",
        f"{'':28} {'start':>10} {'end':>10} {'drift':>10}",
        *(
            f"{name:28} {fmt(a, spec):>10} {fmt(b, spec):>10} {fmt(b - a, '+' + spec):>10}"
            for name, a, b, spec in (
                ("RSS (MB)", first.rss_mb, last.rss_mb, ".1f"),
                ("open fds", float(first.fds), float(last.fds), ".0f"),
                ("threads", float(first.threads), float(last.threads), ".0f"),
                (
                    "asyncio tasks (probe)",
                    math.nan if first.tasks is None else float(first.tasks),
                    math.nan if last.tasks is None else float(last.tasks),
                    ".0f",
                ),
                ("cache entries", float(first.entries), float(last.entries), ".0f"),
                ("latency p50 (ms)", first.p50_ms, last.p50_ms, ".1f"),
                ("latency p99 (ms)", first.p99_ms, last.p99_ms, ".1f"),
                ("cpu ms/request", first.cpu_ms_per_request, last.cpu_ms_per_request, ".2f"),
            )
        ),
        "",
        f"cache store containers at the end (max_entries {opts.max_entries}):",
        "  " + ", ".join(f"{k}={v}" for k, v in sorted(last.store.items())),
        f"asyncio tasks at the end: {last.top_tasks}",
        f"idle before the load: RSS {result['idle']['before']['rss_mb']:.1f} MB,"
        f" fds {result['idle']['before']['fds']}, threads {result['idle']['before']['threads']},"
        f" tasks {(result['idle']['before']['probe'] or {}).get('tasks')}",
        f"idle after the load (2.5 s): RSS {result['idle']['rss_mb']:.1f} MB,"
        f" fds {result['idle']['fds']}, threads {result['idle']['threads']},"
        f" tasks {(result['idle']['probe'] or {}).get('tasks')}",
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
