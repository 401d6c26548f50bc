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
gateway does not expose, read by a probe thread started in the gateway process through a
`sitecustomize` module on its PYTHONPATH (gateway/ is not modified): the number of asyncio tasks
not done (asyncio.tasks._all_tasks, the registry asyncio.all_tasks() reads) with the most
common coroutines, and the length of every container attribute of the cache store object
(reached from the cache's sweeper task), to compare with max_entries.

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

import argparse
import asyncio
import json
import math
import os
import random
import sys
import tempfile
import time
import urllib.request
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from procs import Server, cpu_seconds, fmt, load_average, percentile, pythonpath  # noqa: E402

ADMIN_KEY = "soak-bench-admin-key"
TENANT_KEYS = {"soak-a": "sk-soak-a-0123456789", "soak-b": "sk-soak-b-0123456789"}
MAX_IN_FLIGHT = 256
WORDS = [
    a + b + c
    for a in ("ka", "lo", "mi", "ne", "ru", "sa")
    for b in ("ti", "vo", "ze", "pa", "do")
    for c in ("fe", "gi", "hu", "ja", "ko", "lu")
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]

# Runs inside the gateway process (its PYTHONPATH starts with the probe's directory): a daemon
# thread writing what it sees to $SOAK_PROBE_OUT every 2 s. Reads only; changes nothing.
PROBE = r'''
import asyncio.tasks, collections, json, os, threading, time, weakref

def _containers(obj):
    out = {}
    for name in dir(obj):
        if name.startswith("__"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if isinstance(value, (list, dict, set, frozenset, collections.deque)):
            out[name] = len(value)
    try:
        out["__len__"] = len(obj)
    except Exception:
        pass
    return out

def _find_store(live):
    """The cache store, reached from the cache's own sweeper task (`self` in its frame is the
    SemanticCache). gc.get_objects() cannot find it: the gateway freezes start-up objects
    (gc.freeze), which hides them from it."""
    for task in live:
        frame = getattr(task.get_coro(), "cr_frame", None)
        owner = frame.f_locals.get("self") if frame is not None else None
        if type(owner).__name__ == "SemanticCache":
            return owner.store
    return None

def _run(path):
    store = None
    last_search = 0.0
    while True:
        time.sleep(2)
        try:
            tasks = []
            for _ in range(100):
                try:
                    tasks = list(asyncio.tasks._all_tasks)
                    break
                except RuntimeError:
                    continue
            live = [t for t in tasks if not t.done()]
            names = collections.Counter()
            for t in live:
                coro = t.get_coro()
                names[getattr(coro, "__qualname__", type(coro).__name__)] += 1
            found = store() if store is not None else None
            if found is None and time.monotonic() - last_search > 10:
                last_search = time.monotonic()
                obj = _find_store(live)
                if obj is not None:
                    store, found = weakref.ref(obj), obj
            sample = {
                "time": time.time(),
                "tasks": len(live),
                "top_tasks": dict(names.most_common(6)),
                "threads": threading.active_count(),
                "store": _containers(found) if found is not None else {},
                "store_type": type(found).__name__ if found is not None else None,
            }
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(sample, f)
            os.replace(tmp, path)
        except Exception as exc:  # never take the gateway down
            with open(path + ".error", "a") as f:
                f.write(repr(exc) + "\n")

_path = os.environ.get("SOAK_PROBE_OUT")
if _path:
    threading.Thread(target=_run, args=(_path,), name="soak-probe", daemon=True).start()
'''


@dataclass(frozen=True)
class Options:
    minutes: float = 3.0
    window: float = 30.0
    warmup: float = 15.0
    rate: float = 40.0
    max_entries: int = 1000
    embedder: str = "minilm"
    latency_ms: float = 20.0
    seed: int = 1
    json_out: Path | None = None
    quiet: bool = False


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


def http_json(url: str, data: object | None = None, admin: bool = False) -> Any:
    headers = {"Content-Type": "application/json"}
    if admin:
        headers["Authorization"] = f"Bearer {ADMIN_KEY}"
    body = None if data is None else json.dumps(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def gateway_config(workdir: Path, fake: str, opts: Options) -> Path:
    embedder = "{type: hash}" if opts.embedder == "hash" else "{}"
    keys = "".join(f"    - {{env: SOAK_KEY_{n}, tenant: {t}}}\n" for n, t in enumerate(TENANT_KEYS))
    path = workdir / "gateway.yaml"
    path.write_text(
        f"""
server: {{host: 127.0.0.1, port: 0, access_log: false}}
auth:
  admin_key_env: GATEWAY_ADMIN_KEY
  keys:
{keys}
providers:
  fake: {{type: openai, base_url: "{fake}/v1", timeouts: {{connect: 2, read: 10, total: 30}}}}
models:
  - {{name: small, provider: fake, upstream_model: small-up}}
  - {{name: large, provider: fake, upstream_model: large-up}}
routing:
  aliases:
    auto:
      tiers:
        - {{model: small, max_score: 0.5}}
        - {{model: large}}
      escalate: {{tools: 1}}
cache:
  store: {{type: sqlite, path: cache/cache.sqlite3, max_entries: {opts.max_entries}}}
  embedder: {embedder}
  defaults: {{enabled: true}}
guard:
  tools: {{enabled: true}}
"""
    )
    return path


def ready(base: str) -> str | None:
    try:
        body = http_json(base + "/readyz")
    except (OSError, ValueError):
        return None
    ok = body.get("status") == "ready" and (body.get("cache") or {}).get("semantic")
    return base if ok else None


def start(workdir: Path, opts: Options) -> tuple[list[Server], str, Server, Path]:
    """The fake and the gateway (with the probe); (servers, gateway URL, gateway, probe file)."""
    env = {"PYTHONPATH": pythonpath(HERE.parent)}
    fake = Server(
        "fake-upstream",
        [sys.executable, "-m", "gateway.testing.fake_upstream", "--port", "0"],
        workdir,
        env,
    )
    servers = [fake]
    fake_url = fake.wait_ready(fake.log_url, 30)
    http_json(fake_url + "/_fake/config", {"defaults": {"latency_ms": opts.latency_ms}})
    probe_dir = workdir / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    probe_out = workdir / "probe.json"
    env = {
        "PYTHONPATH": os.pathsep.join([str(probe_dir), pythonpath(HERE.parent)]),
        "SOAK_PROBE_OUT": str(probe_out),
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        **{f"SOAK_KEY_{n}": key for n, key in enumerate(TENANT_KEYS.values())},
    }
    config = gateway_config(workdir, fake_url, opts)
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", "0"]
    gateway = Server("gateway", argv, workdir, env)
    servers.append(gateway)
    base = gateway.wait_ready(gateway.log_url, 120)
    base = gateway.wait_ready(lambda: ready(base), 600)
    return servers, base, gateway, probe_out


# --- process measurements ---------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_probe(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


# --- the load ---------------------------------------------------------------------------------


class Load:
    def __init__(self, base: str, opts: Options) -> None:
        self.url = base + "/v1/chat/completions"
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.recent: deque[str] = deque(maxlen=400)
        self.n = 0
        self.in_flight = 0
        self.latencies: list[float] = []
        self.errors = self.abandoned = self.skipped = self.requests = 0
        self.cache: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[None]] = set()

    def take(self) -> dict[str, Any]:
        """What was measured since the last call, and reset."""
        out = {
            "requests": self.requests,
            "errors": self.errors,
            "abandoned": self.abandoned,
            "skipped": self.skipped,
            "p50_ms": percentile(self.latencies, 50),
            "p99_ms": percentile(self.latencies, 99),
            "cache": dict(self.cache),
            "statuses": dict(self.statuses),
        }
        self.latencies, self.cache, self.statuses = [], Counter(), Counter()
        self.errors = self.abandoned = self.skipped = self.requests = 0
        return out

    def next_request(self) -> tuple[bytes, dict[str, str], float | None]:
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
        tenant_key = rng.choice(list(TENANT_KEYS.values()))
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {tenant_key}"}
        return json.dumps(body).encode(), headers, give_up

    async def one(self, session: Any) -> None:
        import aiohttp

        body, headers, give_up = self.next_request()
        started = time.perf_counter()
        try:
            timeout = aiohttp.ClientTimeout(total=give_up or 60)
            async with session.post(self.url, data=body, headers=headers, timeout=timeout) as r:
                await r.read()
                self.statuses[str(r.status)] += 1
                if r.status == 200:
                    self.latencies.append(time.perf_counter() - started)
                    self.cache[r.headers.get("x-gateway-cache", "-")] += 1
                else:
                    self.errors += 1
        except TimeoutError:
            if give_up:
                self.abandoned += 1
            else:
                self.errors += 1
                self.statuses["timeout"] += 1
        except aiohttp.ClientError as err:
            self.errors += 1
            self.statuses[type(err).__name__] += 1
        finally:
            self.requests += 1
            self.in_flight -= 1

    async def run(self, session: Any, seconds: float) -> None:
        """Fire at the rate for `seconds` (open loop)."""
        interval = 1 / self.opts.rate
        t0 = time.perf_counter()
        n = 0
        while True:
            n += 1
            due = t0 + n * interval
            if due - t0 > seconds:
                return
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.in_flight >= MAX_IN_FLIGHT:
                self.skipped += 1
                continue
            self.in_flight += 1
            task = asyncio.create_task(self.one(session))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)


async def soak(opts: Options, workdir: Path) -> tuple[list[Window], dict[str, Any]]:
    import aiohttp

    servers, base, gateway, probe_out = await asyncio.to_thread(start, workdir, opts)
    pid = gateway.proc.pid
    windows: list[Window] = []
    try:
        await asyncio.sleep(2.5)  # the probe has written once
        before = {
            "rss_mb": rss_mb(pid),
            "fds": fds(pid),
            "threads": threads(pid),
            "probe": read_probe(probe_out),
        }
        load = Load(base, opts)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar()
        ) as session:
            say(opts, f"warm-up {opts.warmup:.0f} s at {opts.rate:g} req/s")
            await load.run(session, opts.warmup)
            load.take()
            count = max(1, round(opts.minutes * 60 / opts.window))
            for i in range(count):
                cpu0 = cpu_seconds(pid)
                await load.run(session, opts.window)
                measured = load.take()
                cpu1 = cpu_seconds(pid)
                stats = await asyncio.to_thread(http_json, base + "/admin/cache/stats", None, True)
                probe = read_probe(probe_out)
                w = Window(
                    index=i + 1,
                    start=i * opts.window,
                    requests=measured["requests"],
                    errors=measured["errors"],
                    abandoned=measured["abandoned"],
                    skipped=measured["skipped"],
                    p50_ms=measured["p50_ms"],
                    p99_ms=measured["p99_ms"],
                    cpu_ms_per_request=(cpu1 - cpu0) * 1000 / max(1, measured["requests"]),
                    rss_mb=rss_mb(pid),
                    fds=fds(pid),
                    threads=threads(pid),
                    tasks=probe.get("tasks"),
                    top_tasks=probe.get("top_tasks") or {},
                    entries=int(stats.get("entries", 0)),
                    store=probe.get("store") or {},
                    cache=measured["cache"],
                    statuses=measured["statuses"],
                    load=load_average(),
                )
                windows.append(w)
                say(opts, row(w))
            await asyncio.gather(*list(load.tasks), return_exceptions=True)
        await asyncio.sleep(2.5)  # in-flight work settles; the probe writes once more
        idle = {
            "before": before,
            "rss_mb": rss_mb(pid),
            "fds": fds(pid),
            "threads": threads(pid),
            "probe": read_probe(probe_out),
            "probe_errors": (workdir / "probe.json.error").read_text()
            if (workdir / "probe.json.error").exists()
            else "",
        }
        return windows, idle
    finally:
        for server in reversed(servers):
            server.stop()


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
    with tempfile.TemporaryDirectory(prefix="gateway-soak-") as tmp:
        workdir = Path(tmp)
        try:
            import uvloop

            windows, idle = uvloop.run(soak(opts, workdir))
        except ImportError:
            windows, idle = asyncio.run(soak(opts, workdir))
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--rate", type=float, default=40.0, help="requests per second")
    p.add_argument("--max-entries", type=int, default=1000)
    p.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    p.add_argument("--window", type=float, default=30.0, help="seconds per sample")
    p.add_argument("--warmup", type=float, default=15.0)
    p.add_argument("--json", type=Path, dest="json_out")
    a = p.parse_args(argv)
    opts = Options(
        minutes=a.minutes,
        window=a.window,
        warmup=a.warmup,
        rate=a.rate,
        max_entries=a.max_entries,
        embedder=a.embedder,
        json_out=a.json_out,
    )
    print(
        f"soak: {opts.minutes:g} min at {opts.rate:g} req/s, max_entries {opts.max_entries},"
        f" embedder {opts.embedder}, windows of {opts.window:g} s, load {load_average()}",
        flush=True,
    )
    print(HEADER, flush=True)
    result = run(opts)
    print(summary(result, opts))
    if opts.json_out is not None:
        opts.json_out.write_text(
            json.dumps(
                {
                    "options": {**asdict(opts), "json_out": None},
                    "windows": [asdict(w) for w in result["windows"]],
                    "idle": result["idle"],
                    "checks": result["checks"],
                },
                indent=2,
                default=str,
            )
        )
        print(f"\nwritten: {opts.json_out}")
    return 0 if result["checks"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
