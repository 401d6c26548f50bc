"""Scale-out: 1, 2 and 3 gateway replicas behind nginx, sharing one Redis (cache, circuit
breakers, rate limits), in one run.

    python bench/scaleout.py                  # default: a few minutes
    python bench/scaleout.py --quick          # smoke check, under a minute
    python bench/scaleout.py --json out.json  # also save every sample
    python bench/scaleout.py --workloads a --breakers memory   # what-if: local breakers

nginx and redis-server must be installed (the script says how when they are not). The cache
is exact + semantic with the hash embedder on the pool replicas (MiniLM on every request would
be the whole cost); --exact-only and --breakers memory measure what those parts cost.

Processes, each on a free loopback port: a throwaway redis-server; the fake upstream with a
fixed latency (20 ms by default), so the gateway's own work is what scales; three gateway
replicas sharing Redis for the cache (exact tier read from Redis, semantic tier on each
replica's local index fed by a Redis Stream), the breakers and the rate limits (a default
limit far above the load, so every request still goes through the shared limiter); one nginx
(`nginx -c CONF -p TMPDIR`, config generated here) listening on three ports, balancing over the
first 1, 2 or 3 replicas (round robin, keep-alive to the replicas, proxy_buffering off, and an
`X-Upstream-Addr` header naming the replica that answered); and two more replicas with the real
embedder (MiniLM) in their own cache namespace, for the replication-lag probe. The load
generator is this process (aiohttp on uvloop) and a stream observer is one more (an external
follower of the cache's event streams).

Workloads:
  (a) throughput: closed-loop clients (16 and 64) sending chat completions with unique prompts
      (every request is a cache miss and a cache write), to the fake upstream directly, to
      replica 1 directly (no nginx) and through nginx to 1, 2 and 3 replicas. Rounds rotate
      the target order; tables show medians over rounds, ratios are paired within a round.
      The cache is purged before each measurement so every one starts from the same state.
  (b) shared cache: a pool of questions asked in random order through nginx to 3 replicas; the
      answering replica (X-Upstream-Addr) and x-gateway-cache of every response give each
      replica's hit rate and how many hits were on entries another replica stored (also read
      back from each replica's /metrics). Hash embedder: exact repeats only.
  (c) replication lag of semantic entries: a question written through replica W, its rewording
      polled on replica R (real MiniLM embedder) until R's search finds W's entry (R reports a
      similarity: its index holds the entry). Each probe has its own scope, so nothing else can
      answer; R's upstream answers are truncated (finish_reason length), so R never stores its
      polls. Measured idle and with both W and R under load.

On a 2-core machine every process above shares two cores: absolute numbers are small and
3 replicas cannot get 3x; the ratios and the CPU per request of each component are the point.
The machine may be shared: before each measurement the bench waits (up to --quiet-wait s) for
other processes to go quiet, and the table shows how many cores they used meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis
import uvloop
from cache_questions import FILLER, PAIRS
from procs import (
    Server,
    cpu_seconds,
    fmt,
    free_port,
    http_ok,
    load_average,
    percentile,
    pythonpath,
)

HERE = Path(__file__).resolve().parent
MODEL = "bench-model"
LAG_MODEL = "lag-model"
LOAD_MODEL = "load-model"
SYSTEM = "You are a concise assistant."
ADMIN_KEY = "scaleout-bench-admin-key"
HEADERS = {"Content-Type": "application/json"}
ADMIN_HEADERS = {**HEADERS, "Authorization": f"Bearer {ADMIN_KEY}"}
POOL_NS, LAG_NS = "scaleout:pool", "scaleout:lag"
UPSTREAM, DIRECT = "upstream", "gw1-direct"
NGINX_INSTALL = (
    "nginx is not installed. Install it with your package manager, e.g.\n"
    "  Debian/Ubuntu: sudo apt-get install -y nginx\n"
    "  Fedora/RHEL:   sudo dnf install -y nginx\n"
    "  macOS:         brew install nginx\n"
    "The bench runs its own nginx (generated config, temporary directory); no service is used."
)
REDIS_INSTALL = (
    "redis-server is not installed (Debian/Ubuntu: sudo apt-get install -y redis-server)."
)

# An external follower of the cache's event streams: for every event, the time from its write
# (the writer's clock, in the event) to its arrival here. Lines "write_ts lag_seconds".
OBSERVER = r"""
import sys, time, redis
url, out, *streams = sys.argv[1:]
client = redis.Redis.from_url(url)
last = {}
for s in streams:
    newest = client.xrevrange(s, count=1)
    last[s] = newest[0][0] if newest else b"0-0"
with open(out, "a") as f:
    while True:
        replies = client.xread(last, count=1000, block=1000)
        now = time.time()
        for stream, events in replies:
            for event_id, fields in events:
                last[stream.decode()] = event_id
                ts = fields.get(b"ts")
                if ts:
                    f.write(f"{float(ts):.6f} {now - float(ts):.6f}\n")
        f.flush()
"""


@dataclass(frozen=True)
class Options:
    quick: bool
    rounds: int
    seconds: float
    warmup_seconds: float
    concurrency: tuple[int, ...]
    latency_ms: float
    pool: int
    pool_requests: int
    pool_concurrency: int
    lag_probes: int
    lag_timeout: float
    lag_load_concurrency: int
    nginx_workers: int
    breakers: str
    exact_only: bool
    quiet_wait: float
    workloads: str
    json_out: Path | None


# --- processes -------------------------------------------------------------------------------


@dataclass
class Stack:
    """Every process of the run, the URLs to reach them and the pids whose CPU is counted."""

    dir: Path
    servers: list[Server]
    redis_url: str = ""
    upstream: str = ""  # the fake upstream's base URL (no /v1)
    replicas: list[str] = field(default_factory=list)  # base URLs of the pool replicas
    replica_pids: list[int] = field(default_factory=list)
    nginx: list[str] = field(default_factory=list)  # base URL balancing over 1, 2, 3 replicas
    nginx_pid: int = 0
    fake_pid: int = 0
    redis_pid: int = 0
    writer: str = ""  # lag probe: replica W (writes), replica R (polls)
    reader: str = ""
    lag_pids: list[int] = field(default_factory=list)
    other_pids: list[int] = field(default_factory=list)  # lag replicas, stream observer
    observer_file: Path = Path()

    def python(self, name: str, *argv: str, env: dict[str, str] | None = None) -> Server:
        env = {"PYTHONPATH": pythonpath(HERE.parent), **(env or {})}
        server = Server(name, [sys.executable, *argv], self.dir, env)
        self.servers.append(server)
        return server

    def targets(self) -> dict[str, str]:
        """Name -> chat completions URL, for workload (a)."""
        out = {UPSTREAM: self.upstream + "/v1/chat/completions"}
        out[DIRECT] = self.replicas[0] + "/v1/chat/completions"
        for n, base in enumerate(self.nginx, 1):
            out[f"nginx-{n}"] = base + "/v1/chat/completions"
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each component (the lag replicas, idle here, are left out),
        and of the whole machine (every core's busy time, from /proc/stat)."""
        nginx = [self.nginx_pid, *children(self.nginx_pid)]
        out = {f"gw{n}": cpu_seconds(p) for n, p in enumerate(self.replica_pids, 1)}
        out["nginx"] = sum(cpu_seconds(p) for p in nginx)
        out["redis"] = cpu_seconds(self.redis_pid)
        out["fake"] = cpu_seconds(self.fake_pid)
        out["loadgen"] = cpu_seconds(os.getpid())
        out["bench_other"] = sum(cpu_seconds(p) for p in self.other_pids)  # lag replicas...
        out["machine"] = machine_busy()
        return out


def machine_busy() -> float:
    """Busy CPU seconds of all cores since boot (everything but idle and iowait)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return math.nan
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user..steal, minus idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            out += [int(p) for p in (task / "children").read_text().split()]
    return out


def http_json(url: str, data: object | None = None, headers: dict[str, str] | None = None) -> Any:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers=headers or HEADERS)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def start_redis(stack: Stack, binary: str) -> None:
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(stack.dir)]
    server = Server("redis", argv, stack.dir)
    stack.servers.append(server)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)

    def probe() -> str | None:
        with contextlib.suppress(redis.RedisError):
            if client.ping():
                return url
        return None

    try:
        stack.redis_url = server.wait_ready(probe, 15)
    finally:
        client.close()
    stack.redis_pid = server.proc.pid


def start_fake(stack: Stack, latency_ms: float) -> None:
    server = stack.python("fake-upstream", "-m", "gateway.testing.fake_upstream", "--port", "0")
    stack.upstream = server.wait_ready(server.log_url, 30)
    stack.fake_pid = server.proc.pid
    http_json(
        stack.upstream + "/_fake/config",
        {
            "defaults": {"latency_ms": latency_ms},
            # Replica R's upstream model: quick, and truncated, so R never stores its polls.
            "models": {
                "lag-read": {
                    "replies": [{"content": "truncated", "finish_reason": "length"}],
                }
            },
        },
    )


def shared_sections(
    redis_url: str, namespace: str, embedder: str, breakers: str = "redis", semantic: bool = True
) -> str:
    breaker_storage = f"type: redis, url: '{redis_url}', namespace: scaleout"
    return (
        "cache:\n"
        f"  store: {{type: redis, url: '{redis_url}', namespace: '{namespace}'}}\n"
        f"  embedder: {embedder}\n"
        f"  defaults: {{enabled: true, semantic: {str(semantic).lower()}}}\n"
        "resilience:\n"
        f"  breaker_storage: {{{breaker_storage if breakers == 'redis' else 'type: memory'}}}\n"
        "rate_limits:\n"
        f"  storage: {{type: redis, url: '{redis_url}', namespace: scaleout}}\n"
        # Far above the load: never refuses, but every request goes through the shared limiter.
        "  default: {requests_per_second: 1000000, burst: 1000000, concurrent: 100000,"
        " tokens_per_minute: 1000000000}\n"
    )


def gateway_config(stack: Stack, name: str, models: str, sections: str) -> Path:
    path = stack.dir / f"{name}.yaml"
    path.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"
        "providers:\n"
        f"  fake: {{type: openai, base_url: '{stack.upstream}/v1', max_connections: 1000}}\n"
        f"models:\n{models}{sections}"
    )
    return path


def start_gateways(stack: Stack, replicas: int, opts: Options) -> None:
    """The pool replicas (hash embedder) and the two lag replicas (MiniLM), started together."""
    sections = shared_sections(
        stack.redis_url, POOL_NS, "{type: hash}", opts.breakers, not opts.exact_only
    )
    pool = gateway_config(stack, "pool", f"  - {{name: {MODEL}, provider: fake}}\n", sections)
    env = {"GATEWAY_ADMIN_KEY": ADMIN_KEY}
    pool_servers = [
        stack.python(f"gateway-{n}", "-m", "gateway", "serve", "--config", str(pool), env=env)
        for n in range(1, replicas + 1)
    ]
    lag_servers = []
    for role, upstream_model in (("writer", "lag-write"), ("reader", "lag-read")):
        models = (
            f"  - {{name: {LAG_MODEL}, provider: fake, upstream_model: {upstream_model}}}\n"
            # Background load on the lag replicas: exact tier only (no embedding per request).
            f"  - {{name: {LOAD_MODEL}, provider: fake, upstream_model: {MODEL},"
            " cache: {semantic: false}}\n"
        )
        # MiniLM (the default embedder) without the micro-batch window: finer poll resolution.
        sections = shared_sections(stack.redis_url, LAG_NS, "{batch_window_ms: 0}")
        config = gateway_config(stack, role, models, sections)
        lag_servers.append(
            stack.python(
                f"gateway-{role}", "-m", "gateway", "serve", "--config", str(config), env=env
            )
        )
    for server in pool_servers:
        stack.replicas.append(server.wait_ready(server.log_url, 60))
        stack.replica_pids.append(server.proc.pid)
    stack.writer, stack.reader = (s.wait_ready(s.log_url, 120) for s in lag_servers)
    stack.lag_pids = [s.proc.pid for s in lag_servers]
    stack.other_pids += stack.lag_pids


def wait_semantic(stack: Stack, timeout: float) -> None:
    """Until both lag replicas have loaded their embedder (the semantic tier is on)."""
    deadline = time.monotonic() + timeout
    for base in (stack.writer, stack.reader):
        while True:
            stats = http_json(base + "/admin/cache/stats", headers=ADMIN_HEADERS)
            if stats.get("semantic"):
                break
            if stats.get("embedder_error"):
                raise RuntimeError(f"{base}: embedder failed: {stats['embedder_error']}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{base}: embedder not loaded after {timeout:.0f} s")
            time.sleep(0.5)


def nginx_config(stack: Stack, ports: list[int], workers: int) -> str:
    d = stack.dir
    upstreams, servers = [], []
    for n, port in enumerate(ports, 1):
        members = "".join(
            f"    server {url.removeprefix('http://')};\n" for url in stack.replicas[:n]
        )
        upstreams.append(
            f"  upstream gw{n} {{\n{members}    keepalive 128;\n"
            "    keepalive_requests 1000000;\n  }\n"
        )
        servers.append(
            "  server {\n"
            f"    listen 127.0.0.1:{port};\n"
            "    location / {\n"
            f"      proxy_pass http://gw{n};\n"
            "      proxy_http_version 1.1;\n"
            '      proxy_set_header Connection "";\n'
            "      proxy_buffering off;\n"  # SSE goes through as it comes
            "      add_header X-Upstream-Addr $upstream_addr always;\n"
            "    }\n"
            "  }\n"
        )
    return (
        f"worker_processes {workers};\n"
        f"pid {d}/nginx.pid;\n"
        f"error_log {d}/nginx-error.log warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        '  log_format bench \'$remote_addr [$time_local] "$request" $status '
        "$upstream_addr $request_time $upstream_response_time';\n"
        f"  access_log {d}/nginx-access.log bench buffer=64k flush=1s;\n"
        f"  client_body_temp_path {d}/nginx-client-body;\n"
        f"  proxy_temp_path {d}/nginx-proxy;\n"
        f"  fastcgi_temp_path {d}/nginx-fastcgi;\n"
        f"  uwsgi_temp_path {d}/nginx-uwsgi;\n"
        f"  scgi_temp_path {d}/nginx-scgi;\n"
        "  keepalive_requests 1000000;\n" + "".join(upstreams) + "".join(servers) + "}\n"
    )


def start_nginx(stack: Stack, binary: str, workers: int) -> None:
    ports = [free_port() for _ in stack.replicas]
    conf = stack.dir / "nginx.conf"
    conf.write_text(nginx_config(stack, ports, workers))
    server = Server(
        "nginx", [binary, "-c", str(conf), "-p", str(stack.dir), "-g", "daemon off;"], stack.dir
    )
    stack.servers.append(server)
    stack.nginx = [f"http://127.0.0.1:{p}" for p in ports]
    for base in stack.nginx:
        server.wait_ready(healthy(base), 15)
    stack.nginx_pid = server.proc.pid


def healthy(base: str) -> Callable[[], str | None]:
    """A readiness probe: `base` once its /healthz answers 200."""
    return lambda: base if http_ok(base + "/healthz") else None


def start_observer(stack: Stack) -> None:
    stack.observer_file = stack.dir / "stream-lags.txt"
    streams = [f"{POOL_NS}:events", f"{LAG_NS}:events"]
    observer = stack.python(
        "stream-observer", "-c", OBSERVER, stack.redis_url, str(stack.observer_file), *streams
    )
    stack.other_pids.append(observer.proc.pid)


def start_stack(stack: Stack, nginx: str, redis_server: str, opts: Options) -> None:
    start_redis(stack, redis_server)
    start_fake(stack, opts.latency_ms)
    start_gateways(stack, 3, opts)
    start_nginx(stack, nginx, opts.nginx_workers)
    start_observer(stack)
    wait_semantic(stack, 600)
    for server in stack.servers:
        print(f"  {server.name}: pid {server.proc.pid}, log {server.log_path}")


def purge(stack: Stack) -> None:
    """Empty the pool's shared cache (through replica 1; the others drop it from the stream)."""
    http_json(stack.replicas[0] + "/admin/cache/purge", {}, ADMIN_HEADERS)


# --- load ------------------------------------------------------------------------------------

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "fe", "gi", "hu"]


class Prompts:
    """Unique chat bodies: random pseudo-words plus a counter, so no two are alike (not even
    for the hash embedder's 3-grams)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        r = self._rng
        self._words = ["".join(r.choice(_SYLLABLES) for _ in range(3)) for _ in range(3000)]
        self._n = 0

    def body(self, model: str = MODEL) -> bytes:
        self._n += 1
        words = " ".join(self._rng.choices(self._words, k=8))
        return chat_body(model, SYSTEM, f"Tell me about {words} (request {self._n}).")


def chat_body(model: str, system: str, question: str) -> bytes:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return orjson.dumps({"model": model, "messages": messages, "temperature": 0.2})


@dataclass
class Run:
    """The outcome of one closed loop."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    cache: Counter[str] = field(default_factory=Counter)
    error_examples: list[str] = field(default_factory=list)


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    concurrency: int,
    seconds: float,
    next_body: Callable[[], bytes],
    stop: asyncio.Event | None = None,
) -> Run:
    """`concurrency` workers, each sending its next request as soon as the last one is read,
    for `seconds` (or until `stop` is set)."""
    run = Run()
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline and not (stop and stop.is_set()):
            body = next_body()
            started = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=HEADERS) as resp:
                    data = await resp.read()
                    ok = resp.status == 200
                    run.cache[resp.headers.get("x-gateway-cache", "-")] += 1
            except (TimeoutError, aiohttp.ClientError) as exc:
                ok, data = False, repr(exc).encode()
            if ok:
                run.latencies.append(time.perf_counter() - started)
            else:
                run.errors += 1
                if len(run.error_examples) < 3:
                    run.error_examples.append(data[:200].decode(errors="replace"))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    run.seconds = time.perf_counter() - started
    return run


def session_for(concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=60),
        cookie_jar=aiohttp.DummyCookieJar(),
    )


# --- (a) throughput --------------------------------------------------------------------------


@dataclass
class Sample:
    """One target at one concurrency in one round."""

    count: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    window: tuple[float, float]  # wall clock (time.time()) of the measured part
    cpu_ms: dict[str, float]  # component -> CPU ms per request
    redis_calls: dict[str, float]  # Redis command -> calls per request
    cache: dict[str, int]  # x-gateway-cache -> responses
    stream_p50_ms: float = math.nan  # stream delivery lag seen by the observer, in the window
    stream_p99_ms: float = math.nan

    @property
    def rps(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def command_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


async def measure(
    stack: Stack, client: redis.Redis, target: str, url: str, concurrency: int, opts: Options
) -> Sample:
    if target != UPSTREAM:
        await asyncio.to_thread(purge, stack)
        await asyncio.sleep(0.3)  # let every replica apply the deletions
    await wait_quiet(stack, opts.quiet_wait)
    prompts = Prompts(seed=hash((target, concurrency, time.time())))
    async with session_for(concurrency) as session:
        await closed_loop(session, url, concurrency, opts.warmup_seconds, prompts.body)
        cpu0, calls0, t0 = stack.cpu(), command_calls(client), time.time()
        run = await closed_loop(session, url, concurrency, opts.seconds, prompts.body)
        t1, calls1, cpu1 = time.time(), command_calls(client), stack.cpu()
    n = max(1, len(run.latencies))
    if run.error_examples:
        print(f"    errors from {target}: {run.error_examples}")
    return Sample(
        count=len(run.latencies),
        errors=run.errors,
        seconds=run.seconds,
        p50_ms=percentile(run.latencies, 50),
        p99_ms=percentile(run.latencies, 99),
        window=(t0, t1),
        cpu_ms={k: (cpu1[k] - cpu0[k]) * 1000 / n for k in cpu0},
        redis_calls={
            k: (v - calls0.get(k, 0)) / n
            for k, v in calls1.items()
            if v - calls0.get(k, 0) > 0 and k != "info"
        },
        cache=dict(run.cache),
    )


async def wait_quiet(stack: Stack, max_wait: float, limit: float = 0.3) -> None:
    """Wait (up to `max_wait` s) until processes outside this bench use under `limit` cores:
    the machine may be shared, and other work there would be measured as ours."""
    deadline = time.monotonic() + max_wait
    waited = False
    while True:
        before, t0 = stack.cpu(), time.monotonic()
        await asyncio.sleep(0.5)
        after, t1 = stack.cpu(), time.monotonic()
        own = sum(after[k] - before[k] for k in after if k != "machine")
        foreign = (after["machine"] - before["machine"] - own) / (t1 - t0)
        if foreign < limit or time.monotonic() >= deadline:
            if waited:
                state = "quiet" if foreign < limit else f"still busy ({foreign:.2f} cores)"
                print(f"    machine {state}, measuring", flush=True)
            return
        if not waited:
            print(f"    other work uses {foreign:.2f} cores: waiting for quiet", flush=True)
            waited = True


def foreign_cores(s: Sample) -> float:
    """Cores used meanwhile by processes outside this bench (other work on the machine)."""
    own = sum(v for k, v in s.cpu_ms.items() if k != "machine")
    return max(0.0, (s.cpu_ms["machine"] - own) * s.rps / 1000)


def gateway_cpu(s: Sample) -> float:
    return sum(v for k, v in s.cpu_ms.items() if k.startswith("gw"))


def rotated(items: list[str], by: int) -> list[str]:
    by %= len(items)
    return items[by:] + items[:by]


async def throughput(stack: Stack, opts: Options) -> dict[tuple[str, int], list[Sample]]:
    targets = stack.targets()
    samples: dict[tuple[str, int], list[Sample]] = {}
    client = redis.Redis.from_url(stack.redis_url)
    try:
        for round_no in range(opts.rounds):
            for concurrency in opts.concurrency:
                for name in rotated(list(targets), round_no):
                    s = await measure(stack, client, name, targets[name], concurrency, opts)
                    samples.setdefault((name, concurrency), []).append(s)
                    print(
                        f"  round {round_no + 1}/{opts.rounds} c={concurrency:<3} {name:10}"
                        f" {s.rps:7.0f} req/s  p50 {s.p50_ms:6.2f} ms  p99 {s.p99_ms:7.2f} ms"
                        f"  gateway cpu {gateway_cpu(s):5.2f} ms/req"
                        f"  other work on the machine {foreign_cores(s):4.2f} cores"
                        f"  n={s.count} err={s.errors}",
                        flush=True,
                    )
    finally:
        client.close()
    return samples


# --- (b) shared cache ------------------------------------------------------------------------


@dataclass
class Answer:
    question: int
    replica: str
    result: str  # x-gateway-cache
    latency: float
    done: float  # perf_counter when read


def metric_counts(base: str) -> Counter[str]:
    """gateway_cache_lookups_total of one replica, by result (summed over models)."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: Counter[str] = Counter()
    for m in re.finditer(r"^gateway_cache_lookups_total\{([^}]*)\} ([0-9.e+]+)$", text, re.M):
        result = re.search(r'result="([^"]*)"', m.group(1))
        if result:
            out[result.group(1)] += int(float(m.group(2)))
    return out


async def shared_cache(stack: Stack, opts: Options) -> dict[str, Any]:
    await asyncio.to_thread(purge, stack)
    await asyncio.sleep(0.5)
    await wait_quiet(stack, opts.quiet_wait)
    questions = (FILLER + [q for q, _ in PAIRS])[: opts.pool]
    rng = random.Random(7)
    order = [rng.randrange(len(questions)) for _ in range(opts.pool_requests)]
    bodies = [chat_body(MODEL, SYSTEM, q) for q in questions]
    before = {base: metric_counts(base) for base in stack.replicas}
    answers: list[Answer] = []
    errors: list[str] = []
    url = stack.nginx[-1] + "/v1/chat/completions"
    it = iter(order)
    started = time.perf_counter()

    async def worker(session: aiohttp.ClientSession) -> None:
        for q in it:
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=bodies[q], headers=HEADERS) as resp:
                    data = await resp.read()
                    if resp.status != 200:
                        errors.append(f"HTTP {resp.status}: {data[:200]!r}")
                        continue
                    t1 = time.perf_counter()
                    answers.append(
                        Answer(
                            q,
                            resp.headers.get("X-Upstream-Addr", "?"),
                            resp.headers.get("x-gateway-cache", "-"),
                            t1 - t0,
                            t1,
                        )
                    )
            except (TimeoutError, aiohttp.ClientError) as exc:
                errors.append(repr(exc))

    async with session_for(opts.pool_concurrency) as session:
        await asyncio.gather(*(worker(session) for _ in range(opts.pool_concurrency)))
    seconds = time.perf_counter() - started
    await asyncio.sleep(0.2)
    after = {base: metric_counts(base) for base in stack.replicas}
    return analyse_cache(stack, questions, answers, errors, before, after, seconds)


def analyse_cache(
    stack: Stack,
    questions: list[str],
    answers: list[Answer],
    errors: list[str],
    before: dict[str, Counter[str]],
    after: dict[str, Counter[str]],
    seconds: float,
) -> dict[str, Any]:
    answers.sort(key=lambda a: a.done)
    seen_miss: set[tuple[str, int]] = set()  # (replica, question) it answered by a miss
    seen_any: set[tuple[str, int]] = set()
    missed: Counter[int] = Counter()
    per: dict[str, Counter[str]] = {}
    for a in answers:
        c = per.setdefault(a.replica, Counter())
        c["requests"] += 1
        c[a.result] += 1
        if a.result.startswith("hit"):
            if (a.replica, a.question) not in seen_miss:
                c["hits_from_others"] += 1
        elif a.result == "miss":
            seen_miss.add((a.replica, a.question))
            missed[a.question] += 1
        seen_any.add((a.replica, a.question))
    addr = {base.removeprefix("http://"): base for base in stack.replicas}
    rows = []
    for n, base in enumerate(stack.replicas, 1):
        name = base.removeprefix("http://")
        c = per.get(name, Counter())
        m = after[base] - before[base]
        hits = c["hit-exact"] + c["hit-semantic"]
        rows.append(
            {
                "replica": f"gateway-{n}",
                "requests": c["requests"],
                "hit_exact": c["hit-exact"],
                "hit_semantic": c["hit-semantic"],
                "miss": c["miss"],
                "hit_rate": hits / c["requests"] if c["requests"] else math.nan,
                "hits_from_others": c["hits_from_others"],
                "metrics": dict(m),
            }
        )
    unknown = [r for r in per if r not in addr]
    total = len(answers)
    misses = sum(missed.values())
    hit_lat = [a.latency for a in answers if a.result.startswith("hit")]
    miss_lat = [a.latency for a in answers if a.result == "miss"]
    return {
        "pool": len(questions),
        "requests": total,
        "seconds": seconds,
        "errors": len(errors),
        "error_examples": errors[:3],
        "unknown_replicas": unknown,
        "rows": rows,
        "misses": misses,
        "first_misses": len(missed),
        "duplicate_misses": misses - len(missed),
        "hit_rate": 1 - misses / total if total else math.nan,
        # Had each replica its own cache: its first sight of a question is a miss.
        "local_misses": len(seen_any),
        "local_hit_rate": 1 - len(seen_any) / total if total else math.nan,
        "hit_p50_ms": percentile(hit_lat, 50),
        "miss_p50_ms": percentile(miss_lat, 50),
        "other_results": {
            k: v
            for k, v in Counter(a.result for a in answers).items()
            if k not in ("hit-exact", "hit-semantic", "miss")
        },
    }


# --- (c) replication lag ---------------------------------------------------------------------


@dataclass
class Probe:
    pair: int
    seen: bool
    result: str  # x-gateway-cache of the poll that saw the entry
    similarity: float
    lower_ms: float  # the last poll that did not see it was sent this long after W answered
    upper_ms: float  # the first poll that saw it was read this long after W answered
    polls: int
    poll_ms: float  # median poll duration
    write_result: str


async def probe_once(
    session: aiohttp.ClientSession, stack: Stack, tag: str, i: int, timeout: float
) -> Probe:
    first, second = PAIRS[i % len(PAIRS)]
    system = f"{SYSTEM} (lag probe {tag}-{i})"  # a scope of its own: nothing else can match
    write_url = stack.writer + "/v1/chat/completions"
    poll_url = stack.reader + "/v1/chat/completions"
    write_body, poll_body = (
        chat_body(LAG_MODEL, system, first),
        chat_body(LAG_MODEL, system, second),
    )
    written: list[float] = []
    write_result = ["?"]

    async def write() -> None:
        async with session.post(write_url, data=write_body, headers=HEADERS) as resp:
            await resp.read()
            written.append(time.perf_counter())
            write_result[0] = f"{resp.status} {resp.headers.get('x-gateway-cache', '-')}"

    polls: list[tuple[float, float, str | None, str]] = []  # sent, read, similarity, result

    async def poll() -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            async with session.post(poll_url, data=poll_body, headers=HEADERS) as resp:
                await resp.read()
                similarity = resp.headers.get("x-gateway-cache-similarity")
                result = resp.headers.get("x-gateway-cache", "-")
            polls.append((sent, time.perf_counter(), similarity, result))
            if similarity is not None and written:
                return

    await asyncio.gather(write(), poll())
    t_w = written[0]
    seen = next((k for k, p in enumerate(polls) if p[2] is not None), None)
    durations = [(r - s) * 1000 for s, r, _, _ in polls]
    if seen is None:
        return Probe(
            i,
            False,
            "-",
            math.nan,
            math.nan,
            math.nan,
            len(polls),
            statistics.median(durations) if durations else math.nan,
            write_result[0],
        )
    lower = max(0.0, polls[seen - 1][0] - t_w) * 1000 if seen else 0.0
    upper = max(0.0, polls[seen][1] - t_w) * 1000
    return Probe(
        i,
        True,
        polls[seen][3],
        float(polls[seen][2] or "nan"),
        lower,
        upper,
        len(polls),
        statistics.median(durations),
        write_result[0],
    )


async def replication_lag(stack: Stack, opts: Options, under_load: bool) -> dict[str, Any]:
    tag = "load" if under_load else "idle"
    await wait_quiet(stack, opts.quiet_wait)
    stop = asyncio.Event()
    background: list[asyncio.Task[Run]] = []
    load_session = session_for(max(2, opts.lag_load_concurrency))
    if under_load:
        prompts = Prompts(seed=11)
        per = max(1, opts.lag_load_concurrency // 2)
        for base in (stack.writer, stack.reader):
            url = base + "/v1/chat/completions"
            coro = closed_loop(load_session, url, per, 3600, lambda: prompts.body(LOAD_MODEL), stop)
            background.append(asyncio.create_task(coro))
        await asyncio.sleep(1.0)  # let the load settle
    probes: list[Probe] = []
    t0 = time.time()
    try:
        async with session_for(8) as session:
            for i in range(opts.lag_probes):
                probes.append(await probe_once(session, stack, tag, i, opts.lag_timeout))
    finally:
        t1 = time.time()
        stop.set()
        runs = await asyncio.gather(*background)
        await load_session.close()
    seen = [p for p in probes if p.seen]
    load_rps = sum(len(r.latencies) / r.seconds for r in runs if r.seconds)
    return {
        "condition": f"under load (c={opts.lag_load_concurrency})" if under_load else "idle",
        "probes": len(probes),
        "seen": len(seen),
        "semantic_hits": sum(p.result == "hit-semantic" for p in seen),
        # Probes where a poll sent after W answered still missed the entry: 0 means the lag
        # was below what the polls can resolve (upper bound ~ one poll).
        "late_misses": sum(p.lower_ms > 0 for p in seen),
        "lower_p50_ms": median_of([p.lower_ms for p in seen]),
        "upper_p50_ms": median_of([p.upper_ms for p in seen]),
        "upper_p99_ms": percentile([p.upper_ms / 1000 for p in seen], 99),
        "upper_max_ms": max((p.upper_ms for p in seen), default=math.nan),
        "poll_ms": median_of([p.poll_ms for p in probes]),
        "load_rps": load_rps,
        "load_errors": sum(r.errors for r in runs),
        "window": (t0, t1),
        "probe_list": [asdict(p) for p in probes],
    }


# --- the stream observer ---------------------------------------------------------------------


class StreamLags:
    """The observer's samples, looked up by write-time window."""

    def __init__(self, path: Path) -> None:
        pairs = []
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    ts, lag = line.split()
                    pairs.append((float(ts), float(lag)))
        pairs.sort()
        self.ts = [p[0] for p in pairs]
        self.lags = [p[1] for p in pairs]

    def window(self, start: float, end: float) -> list[float]:
        import bisect

        return self.lags[bisect.bisect_left(self.ts, start) : bisect.bisect_right(self.ts, end)]


# --- report ----------------------------------------------------------------------------------


def median_of(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def paired_ratio(
    samples: dict[tuple[str, int], list[Sample]], a: str, b: str, c: int, attr: str
) -> float:
    pairs = zip(samples.get((a, c), []), samples.get((b, c), []), strict=False)
    return median_of([getattr(x, attr) / getattr(y, attr) for x, y in pairs if getattr(y, attr)])


def throughput_rows(
    samples: dict[tuple[str, int], list[Sample]], opts: Options
) -> list[dict[str, Any]]:
    rows = []
    names = [UPSTREAM, DIRECT, "nginx-1", "nginx-2", "nginx-3"]
    for c in opts.concurrency:
        for name in names:
            ss = samples.get((name, c), [])
            if not ss:
                continue
            replicas = {UPSTREAM: 0, DIRECT: 1}.get(name)
            if replicas is None:
                replicas = int(name.split("-")[1])
            serving = [f"gw{n}" for n in range(1, replicas + 1)]

            def cpu(keys: list[str], ss: list[Sample] = ss) -> float:
                return median_of([sum(s.cpu_ms.get(k, math.nan) for k in keys) for s in ss])

            gateways = sorted(k for k in ss[0].cpu_ms if k.startswith("gw"))
            rows.append(
                {
                    "target": name,
                    "replicas": replicas,
                    "concurrency": c,
                    "rps": median_of([s.rps for s in ss]),
                    "p50_ms": median_of([s.p50_ms for s in ss]),
                    "p99_ms": median_of([s.p99_ms for s in ss]),
                    "vs_1_replica": paired_ratio(samples, name, "nginx-1", c, "rps"),
                    "vs_direct": paired_ratio(samples, name, DIRECT, c, "rps"),
                    "cpu_ms": {
                        "serving": cpu(serving),
                        "following": cpu([k for k in gateways if k not in serving]),
                        **{k: cpu([k]) for k in ("nginx", "redis", "fake", "loadgen")},
                    },
                    "cores_busy": median_of([s.cpu_ms["machine"] * s.rps / 1000 for s in ss]),
                    "foreign_cores": median_of([foreign_cores(s) for s in ss]),
                    "redis_calls": median_of([sum(s.redis_calls.values()) for s in ss]),
                    "stream_p50_ms": median_of([s.stream_p50_ms for s in ss]),
                    "stream_p99_ms": median_of([s.stream_p99_ms for s in ss]),
                    "errors": sum(s.errors for s in ss),
                }
            )
    return rows


def print_throughput(rows: list[dict[str, Any]], rounds: int) -> None:
    print(
        f"\n(a) Throughput, unique prompts (every request a cache miss and write); medians over "
        f"{rounds} round(s), ratios paired per round.\n"
    )
    head = (
        "| target | replicas | conc | req/s | vs nginx-1 | vs 1 direct | p50 ms | p99 ms "
        "| CPU ms/req: serving replicas | idle replicas (following) | nginx | redis | fake "
        "| loadgen | cores busy (not ours) | Redis cmds/req | stream lag p50/p99 ms | errors |"
    )
    lines = [head, head_sep(head)]
    for r in rows:
        cpu = r["cpu_ms"]
        upstream = r["target"] == UPSTREAM
        target = "upstream (fake, direct)" if upstream else r["target"]
        lines.append(
            f"| {target} | {r['replicas'] or '-'} | {r['concurrency']} | {fmt(r['rps'], '.0f')} "
            f"| {'-' if upstream else fmt(r['vs_1_replica'], '.2f')} "
            f"| {'-' if upstream else fmt(r['vs_direct'], '.2f')} "
            f"| {fmt(r['p50_ms'], '.1f')} | {fmt(r['p99_ms'], '.1f')} "
            f"| {'-' if upstream else fmt(cpu['serving'], '.2f')} "
            f"| {fmt(cpu['following'], '.2f') if r['replicas'] < 3 else '-'} "
            f"| {fmt(cpu['nginx'], '.2f')} "
            f"| {fmt(cpu['redis'], '.2f')} | {fmt(cpu['fake'], '.2f')} "
            f"| {fmt(cpu['loadgen'], '.2f')} | {fmt(r['cores_busy'], '.2f')} "
            f"({fmt(r['foreign_cores'], '.2f')}) "
            f"| {fmt(r['redis_calls'], '.1f')} "
            f"| {fmt(r['stream_p50_ms'], '.1f')} / {fmt(r['stream_p99_ms'], '.1f')} "
            f"| {r['errors']} |"
        )
    print("\n".join(lines))
    print(
        "  CPU ms/req: each component's CPU time over the requests answered (idle replicas "
        "still apply every cache write from the stream); cores busy: the whole machine (all "
        "processes, /proc/stat), in brackets the part used by processes outside this bench; "
        "Redis cmds/req counts the commands run inside Lua scripts too."
    )


def head_sep(head: str) -> str:
    return "|" + "---|" * (head.count("|") - 1)


def redis_breakdown(samples: dict[tuple[str, int], list[Sample]], c: int) -> str:
    ss = samples.get((DIRECT, c), [])
    if not ss:
        return "-"
    commands = sorted({k for s in ss for k in s.redis_calls})
    per = {k: median_of([s.redis_calls.get(k, 0.0) for s in ss]) for k in commands}
    return ", ".join(
        f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.01
    )


def print_cache(res: dict[str, Any]) -> None:
    print(
        f"\n(b) Shared cache: {res['pool']} questions asked {res['requests']} times in random "
        f"order through nginx to 3 replicas ({res['seconds']:.1f} s, {res['errors']} errors); "
        "hash embedder, so hits are exact repeats.\n"
    )
    head = (
        "| replica | requests | hit exact | hit semantic | miss | hit rate "
        "| hits on entries another replica stored | /metrics delta (hit_exact/hit_semantic/miss) |"
    )
    lines = [head, head_sep(head)]
    for r in res["rows"]:
        m = r["metrics"]
        others = r["hits_from_others"] / max(1, r["hit_exact"] + r["hit_semantic"])
        lines.append(
            f"| {r['replica']} | {r['requests']} | {r['hit_exact']} | {r['hit_semantic']} "
            f"| {r['miss']} | {fmt(r['hit_rate'] * 100, '.1f')}% "
            f"| {r['hits_from_others']} ({fmt(100 * others, '.0f')}% of its hits) "
            f"| {m.get('hit_exact', 0)}/{m.get('hit_semantic', 0)}/{m.get('miss', 0)} |"
        )
    print("\n".join(lines))
    print(
        f"\n  all replicas: hit rate {res['hit_rate'] * 100:.1f}%, {res['misses']} misses = "
        f"{res['first_misses']} first asks + {res['duplicate_misses']} repeats asked again before "
        f"the first answer was stored (the write is in the background)."
    )
    print(
        f"  had each replica its own cache: {res['local_misses']} misses, hit rate "
        f"{res['local_hit_rate'] * 100:.1f}% (each replica's first sight of a question)."
    )
    print(
        f"  latency p50: hit {fmt(res['hit_p50_ms'], '.2f')} ms, "
        f"miss {fmt(res['miss_p50_ms'], '.2f')} ms"
    )
    if res["other_results"] or res["unknown_replicas"] or res["error_examples"]:
        print(
            f"  other results: {res['other_results']}, unknown replicas: "
            f"{res['unknown_replicas']}, errors: {res['error_examples']}"
        )


def print_lag(results: list[dict[str, Any]], opts: Options) -> None:
    print(
        "\n(c) Replication lag of semantic entries: written through replica W, polled on replica R "
        "(MiniLM) until R's index holds it.\n   lag is between the bounds: the last poll that "
        "missed it was sent at 'lower', the first that found it was read at 'upper' (ms after "
        "W's answer).\n"
    )
    head = (
        "| condition | probes | found | served as semantic hit | missed after W answered "
        "| lower p50 ms | upper p50 ms "
        "| upper p99 ms | upper max ms | poll ms p50 | stream lag p50/p99/max ms | load req/s |"
    )
    lines = [head, head_sep(head)]
    for r in results:
        lines.append(
            f"| {r['condition']} | {r['probes']} | {r['seen']} | {r['semantic_hits']} "
            f"| {r['late_misses']} "
            f"| {fmt(r['lower_p50_ms'], '.1f')} | {fmt(r['upper_p50_ms'], '.1f')} "
            f"| {fmt(r['upper_p99_ms'], '.1f')} | {fmt(r['upper_max_ms'], '.1f')} "
            f"| {fmt(r['poll_ms'], '.1f')} "
            f"| {fmt(r['stream_p50_ms'], '.2f')} / {fmt(r['stream_p99_ms'], '.2f')} / "
            f"{fmt(r['stream_max_ms'], '.2f')} "
            f"| {fmt(r['load_rps'], '.0f') if r['load_rps'] else '-'} |"
        )
    print("\n".join(lines))
    print(
        "  stream lag: an external follower's write -> arrival time for every event of the "
        "cache streams in that window (what RedisStore.lags records, seen from outside the "
        "replicas; the replicas' own samples have no endpoint)."
    )
    print(
        "  'missed after W answered' counts probes where a poll sent after W's answer still "
        "missed; at 0 the lag is below the probe's resolution (about one poll), and the stream "
        "lag is the finer measure."
    )
    if opts.lag_probes < 50:
        print("  few probes: p99 is the maximum.")


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round (smoke)")
    parser.add_argument("--rounds", type=int, help="rounds over every cell (default 3)")
    parser.add_argument("--seconds", type=float, help="measured seconds per cell (default 4)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per cell (default 1)")
    parser.add_argument("--concurrency", default="16,64", help="comma-separated (default 16,64)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="fake upstream latency")
    parser.add_argument("--pool", type=int, help="(b) distinct questions (default 200)")
    parser.add_argument("--pool-requests", type=int, help="(b) requests (default 10 x pool)")
    parser.add_argument("--pool-concurrency", type=int, default=16, help="(b) clients")
    parser.add_argument("--lag-probes", type=int, help="(c) entries per condition (default 100)")
    parser.add_argument("--lag-timeout", type=float, default=3.0, help="(c) give up after (s)")
    parser.add_argument(
        "--lag-load", type=int, default=16, help="(c) clients loading W and R (half each)"
    )
    parser.add_argument("--nginx-workers", type=int, default=1, help="nginx worker_processes")
    parser.add_argument(
        "--breakers",
        choices=["redis", "memory"],
        default="redis",
        help="what-if: breaker storage of the pool replicas (default redis, shared)",
    )
    parser.add_argument(
        "--exact-only",
        action="store_true",
        help="what-if: pool replicas without the semantic tier (no embedding, no vector search)",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        help="before each measurement, wait up to this many seconds for other processes on "
        "the machine to go quiet (default 60, with --quick 10; 0: do not wait)",
    )
    parser.add_argument(
        "--workloads", default="abc", help="which of (a) (b) (c) to run (default abc)"
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    quick = args.quick
    pool = args.pool or (60 if quick else 200)
    return Options(
        quick=quick,
        rounds=args.rounds or (1 if quick else 3),
        seconds=args.seconds or (1.5 if quick else 4.0),
        warmup_seconds=args.warmup if args.warmup is not None else (0.5 if quick else 1.0),
        concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        latency_ms=args.latency_ms,
        pool=min(pool, len(FILLER) + len(PAIRS)),
        pool_requests=args.pool_requests or 10 * pool,
        pool_concurrency=args.pool_concurrency,
        lag_probes=args.lag_probes or (20 if quick else 100),
        lag_timeout=args.lag_timeout,
        lag_load_concurrency=args.lag_load,
        nginx_workers=args.nginx_workers,
        breakers=args.breakers,
        exact_only=args.exact_only,
        quiet_wait=args.quiet_wait if args.quiet_wait is not None else (10 if quick else 60),
        workloads=args.workloads,
        json_out=args.json,
    )


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/usr/local/sbin", "/sbin"):
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    return None


async def bench(stack: Stack, opts: Options) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": {}, "cache": None, "lags": []}
    if "a" in opts.workloads:
        print("\n(a) throughput")
        out["samples"] = await throughput(stack, opts)
    if "b" in opts.workloads:
        print("\n(b) shared cache")
        out["cache"] = await shared_cache(stack, opts)
    if "c" in opts.workloads:
        print("\n(c) replication lag")
        out["lags"] = [await replication_lag(stack, opts, load) for load in (False, True)]
    return out


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    nginx, redis_server = find_binary("nginx"), find_binary("redis-server")
    if nginx is None:
        print(NGINX_INSTALL, file=sys.stderr)
        return 2
    if redis_server is None:
        print(REDIS_INSTALL, file=sys.stderr)
        return 2
    cpus = os.cpu_count() or 1
    print(
        f"scale-out bench: {opts.rounds} round(s) of {opts.seconds:.1f} s per cell "
        f"(+{opts.warmup_seconds:.1f} s warm-up), concurrency "
        f"{','.join(map(str, opts.concurrency))}, fake upstream latency {opts.latency_ms:.0f} ms, "
        f"nginx worker_processes {opts.nginx_workers}"
    )
    tiers = "exact tier only" if opts.exact_only else "exact + semantic tiers, hash embedder"
    print(
        f"  pool replicas: cache in Redis ({tiers}), breakers in {opts.breakers}, "
        "rate limits in Redis"
    )
    print(f"  {cpus} cpus, load average {load_average()}")
    if cpus < 6:
        print(
            f"  NOTE: {cpus} cores shared by up to 3 replicas + nginx + redis + fake upstream + "
            "load generator (+ 2 idle lag replicas): they contend, so 3 replicas cannot reach "
            "3x; read the ratios and the CPU per request, not the absolute req/s."
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="scaleout-bench-") as tmp:
        stack = Stack(Path(tmp), [])
        try:
            start_stack(stack, nginx, redis_server, opts)
            out = uvloop.run(bench(stack, opts))
            time.sleep(1.2)  # the observer flushes once a second at most
            lags = StreamLags(stack.observer_file)
            for ss in out["samples"].values():
                for s in ss:
                    window = lags.window(*s.window)
                    s.stream_p50_ms = percentile(window, 50)
                    s.stream_p99_ms = percentile(window, 99)
            for r in out["lags"]:
                window = lags.window(*r["window"])
                r["stream_p50_ms"] = percentile(window, 50)
                r["stream_p99_ms"] = percentile(window, 99)
                r["stream_max_ms"] = max(window, default=math.nan) * 1000
                r["stream_events"] = len(window)
            problems = log_problems(stack)
        finally:
            for server in reversed(stack.servers):
                server.stop()
    print(f"\ndone in {time.monotonic() - started:.0f} s; load average {load_average()}")
    rows = throughput_rows(out["samples"], opts)
    if rows:
        print_throughput(rows, opts.rounds)
        results = Counter[str]()
        for (name, _), ss in out["samples"].items():
            if name != UPSTREAM:
                for s in ss:
                    results.update(s.cache)
        print(f"\n  x-gateway-cache over (a): {dict(results)}")
        top = max(opts.concurrency)
        breakdown = redis_breakdown(out["samples"], top)
        print(f"  Redis commands per request, replica 1 direct, c={top}: {breakdown}")
    if out["cache"]:
        print_cache(out["cache"])
    if out["lags"]:
        print_lag(out["lags"], opts)
    if problems:
        print("\nWarnings and errors in the logs:")
        for line in problems:
            print(f"  {line}")
    if opts.json_out:
        opts.json_out.write_text(
            json.dumps(
                {
                    "options": {k: str(v) for k, v in asdict(opts).items()},
                    "cpus": cpus,
                    "throughput": rows,
                    "samples": {
                        f"{k[0]}/{k[1]}": [asdict(s) for s in v] for k, v in out["samples"].items()
                    },
                    "cache": out["cache"],
                    "lag": out["lags"],
                    "log_problems": problems,
                },
                indent=1,
                default=str,
            )
        )
    return 0


PROBLEM = re.compile(
    r'WARNING|ERROR|Traceback|"level": ?"(warning|error)"|\[(warn|error|crit|alert|emerg)\]'
)


def log_problems(stack: Stack) -> list[str]:
    """Warning and error lines of the gateways' and nginx's logs (first few of each)."""
    out = []
    for server in stack.servers:
        if server.name in ("redis", "stream-observer"):
            continue
        paths = [server.log_path]
        if server.name == "nginx":
            paths.append(stack.dir / "nginx-error.log")
        for path in paths:
            with contextlib.suppress(OSError):
                lines = [
                    line
                    for line in path.read_text(errors="replace").splitlines()
                    if PROBLEM.search(line)
                ]
                out += [f"{server.name}: {line[:300]}" for line in lines[:5]]
                if len(lines) > 5:
                    out.append(f"{server.name}: ... {len(lines) - 5} more")
    return out


if __name__ == "__main__":
    sys.exit(main())
