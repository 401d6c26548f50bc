"""Scale-out: 1, 2 and 3 gateway replicas behind nginx, sharing one Redis (cache, circuit
breakers, rate limits), in one run.

    python bench/scaleout.py                  # default: a few minutes
    python bench/scaleout.py --quick          # smoke check, under a minute
    python bench/scaleout.py --json out.json  # also save every sample
    python bench/scaleout.py --workloads a --breakers memory   # what-if: local breakers

nginx and redis-server must be installed. Processes on loopback ports: redis-server, the fake
upstream (20 ms), three pool replicas (hash embedder) sharing Redis, nginx balancing over the
first 1, 2 or 3 of them (`X-Upstream-Addr` names the replica that answered), two MiniLM
replicas in their own namespace for the lag probe, and a follower of the cache's streams
(harness.stream_lags); the load generator is this process. Workloads: (a) throughput with
unique prompts (every request a miss and a write) to the fake, to replica 1 and through nginx
to 1, 2, 3 replicas, rounds rotating the order; (b) a pool of questions through nginx to 3
replicas: hit rates and hits on entries another replica stored; (c) replication lag: a
question written through replica W, its rewording polled on replica R until R finds W's
entry, idle and under load. docs/BENCHMARKS.md ("Scale-out") says what the figures mean; on a
2-core machine 3 replicas cannot reach 3x, so read the ratios and the CPU per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from cache_questions import FILLER, PAIRS
from scaleout_report import (
    TARGETS,
    UPSTREAM,
    Sample,
    print_cache,
    print_lag,
    print_throughput,
    redis_breakdown,
    throughput_rows,
)

from gateway.testing.harness import nginx, redis_server
from gateway.testing.harness.configs import openai_provider, write_config
from gateway.testing.harness.cpu import cpu_of, foreign_seconds, wait_quiet
from gateway.testing.harness.gateways import embedder_loaded, start_gateways
from gateway.testing.harness.load import (
    LoadResult,
    Outcome,
    Request,
    closed_loop,
    send,
    session_for,
)
from gateway.testing.harness.metrics import by_label, scrape
from gateway.testing.harness.options import listed, option, parse_options
from gateway.testing.harness.process import Server
from gateway.testing.harness.procstat import children, load_average
from gateway.testing.harness.prompts import UniqueQuestions
from gateway.testing.harness.results import save_json
from gateway.testing.harness.starters import python_server, start_fake_upstream
from gateway.testing.harness.stats import median, percentile
from gateway.testing.harness.stream_lags import StreamLags
from gateway.testing.harness.sync_http import post_json

MODEL, LAG_MODEL, LOAD_MODEL = "bench-model", "lag-model", "load-model"
SYSTEM = "You are a concise assistant."
ADMIN_KEY = "scaleout-bench-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
# Each group of replicas keeps its keys under its own namespace; the cache's under NS:cache.
POOL_NS, LAG_NS = "scaleout-pool", "scaleout-lag"
CACHE_RESULTS = ("hit-exact", "hit-semantic", "miss")


@dataclass
class Options:
    """Counts left at None take their --quick or full default."""

    quick: bool = option(False, "small counts, one round (smoke)")
    rounds: int | None = option(None, "rounds over every cell (default 3)")
    seconds: float | None = option(None, "measured seconds per cell (default 4)")
    warmup: float | None = option(None, "warm-up seconds per cell (default 1)")
    concurrency: tuple[int, ...] = option((16, 64), "comma-separated", parse=listed(int))
    latency_ms: float = option(20.0, "fake upstream latency")
    pool: int | None = option(None, "(b) distinct questions (default 200)")
    pool_requests: int | None = option(None, "(b) requests (default 10 x pool)")
    pool_concurrency: int = option(16, "(b) clients")
    lag_probes: int | None = option(None, "(c) entries per condition (default 100)")
    lag_timeout: float = option(3.0, "(c) give up after (s)")
    lag_load: int = option(16, "(c) clients loading W and R (half each)")
    nginx_workers: int = option(1, "nginx worker_processes")
    breakers: str = option("redis", "what-if: breaker storage", choices=("redis", "memory"))
    exact_only: bool = option(False, "what-if: pool replicas without the semantic tier")
    # Before each measurement, wait up to this long for other processes to go quiet.
    quiet_wait: float | None = option(None, "seconds to wait (default 60, --quick 10; 0: none)")
    workloads: str = option("abc", "which of (a) (b) (c) to run")
    json_out: Path | None = option(None, "also write every sample to this file", flag="--json")

    def __post_init__(self) -> None:
        quick = self.quick
        self.rounds = self.rounds or (1 if quick else 3)
        self.seconds = self.seconds or (1.5 if quick else 4.0)
        self.warmup = self.warmup if self.warmup is not None else (0.5 if quick else 1.0)
        pool = self.pool or (60 if quick else 200)
        self.pool = min(pool, len(FILLER) + len(PAIRS))
        self.pool_requests = self.pool_requests or 10 * pool
        self.lag_probes = self.lag_probes or (20 if quick else 100)
        self.quiet_wait = self.quiet_wait if self.quiet_wait is not None else 10 if quick else 60


# --- processes -------------------------------------------------------------------------------


@dataclass
class Stack:
    """Every process of the run."""

    dir: Path
    redis: redis_server.RedisServer
    fake: Server
    replicas: list[Server]  # the pool: hash embedder
    writer: Server  # lag probe: replica W writes, replica R (MiniLM both) polls
    reader: Server
    nginx: Server
    balancers: list[nginx.Balancer]  # over the first 1, 2 and 3 replicas
    observer: Server
    observer_file: Path

    @property
    def servers(self) -> list[Server]:
        lag = [self.writer, self.reader]
        ours = [self.redis.server, self.fake, *self.replicas, *lag, self.nginx, self.observer]
        return [s for s in ours if s is not None]

    def targets(self) -> dict[str, str]:
        """Name -> chat completions URL, for workload (a)."""
        bases = [self.fake.url, self.replicas[0].url, *(b.url for b in self.balancers)]
        return {
            name: base + "/v1/chat/completions" for name, base in zip(TARGETS, bases, strict=True)
        }

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each component and of the machine (the lag replicas, idle
        here, and the observer are `bench_other`)."""
        groups = {f"gw{n}": [s.pid] for n, s in enumerate(self.replicas, 1)}
        groups["nginx"] = [self.nginx.pid, *children(self.nginx.pid)]
        groups |= {"redis": [self.redis.pid], "fake": [self.fake.pid], "loadgen": [os.getpid()]}
        groups["bench_other"] = [s.pid for s in (self.writer, self.reader, self.observer)]
        return cpu_of(groups)


def gateway_config(
    fake: str, models: list[Any], redis_url: str, namespace: str, **cache: Any
) -> Any:
    shared = {"type": "redis"}
    breakers = shared if cache.pop("breakers", "redis") == "redis" else {"type": "memory"}
    return {
        "server": {"host": "127.0.0.1", "port": 0},
        "providers": {"fake": openai_provider(f"{fake}/v1", max_connections=1000)},
        "models": models,
        "redis": {"url": redis_url, "namespace": namespace},
        "cache": {"store": shared, "defaults": {"enabled": True, "semantic": True}} | cache,
        "resilience": {"breaker_storage": breakers},
        "rate_limits": {
            "storage": shared,
            # Far above the load: never refuses, but every request goes through the limiter.
            "default": {"requests_per_second": 1_000_000, "burst": 1_000_000}
            | {"concurrent": 100_000, "tokens_per_minute": 1_000_000_000},
        },
    }


def start_stack(es: ExitStack, workdir: Path, opts: Options) -> Stack:
    """redis-server, the fake, the pool replicas (hash embedder) and the two lag replicas
    (MiniLM, started with them), nginx and the stream observer; all stopped with `es`."""
    redis = redis_server.RedisServer(workdir).start(15)
    es.callback(redis.stop)
    fake = es.enter_context(start_fake_upstream(workdir))
    # Replica R's upstream model: quick, and truncated, so R never stores its polls.
    truncated = {"replies": [{"content": "truncated", "finish_reason": "length"}]}
    knobs = {"defaults": {"latency_ms": opts.latency_ms}, "models": {"lag-read": truncated}}
    post_json(fake.url + "/_fake/config", knobs)
    semantic = {"enabled": True, "semantic": not opts.exact_only}
    pool = gateway_config(
        fake.url, [{"name": MODEL, "provider": "fake"}], redis.url, POOL_NS,
        embedder={"type": "hash"}, defaults=semantic, breakers=opts.breakers,
    )  # fmt: skip
    configs = [(f"gateway-{n}", pool) for n in (1, 2, 3)]
    for role, upstream_model in (("writer", "lag-write"), ("reader", "lag-read")):
        models = [
            {"name": LAG_MODEL, "provider": "fake", "upstream_model": upstream_model},
            # Background load on the lag replicas: exact tier only (no embedding per request).
            {"name": LOAD_MODEL, "provider": "fake", "upstream_model": MODEL}
            | {"cache": {"semantic": False}},
        ]
        # MiniLM (the default embedder) without the micro-batch window: finer poll resolution.
        lag = gateway_config(fake.url, models, redis.url, LAG_NS, embedder={"batch_window_ms": 0})
        configs.append((f"gateway-{role}", lag))
    files = [(name, write_config(workdir, c, name=f"{name}.yaml")) for name, c in configs]
    env = {"GATEWAY_ADMIN_KEY": ADMIN_KEY}
    gateways = [es.enter_context(g) for g in start_gateways(workdir, files, env=env)]
    replicas, (writer, reader) = gateways[:3], gateways[3:]
    groups = nginx.balancers(*([r.url for r in replicas[:n]] for n in (1, 2, 3)))
    balancer = nginx.start_nginx(workdir, groups, workers=opts.nginx_workers, access_log=True)
    es.enter_context(balancer)
    observed = workdir / "stream-lags.txt"
    streams = [f"{POOL_NS}:cache:events", f"{LAG_NS}:cache:events"]
    argv = ["-m", "gateway.testing.harness.stream_lags", redis.url, str(observed), *streams]
    observer = es.enter_context(python_server("stream-observer", workdir, argv))
    for gateway in (writer, reader):
        embedder_loaded(gateway, 600)
    stack = Stack(
        workdir, redis, fake, replicas, writer, reader, balancer, groups, observer, observed
    )
    for server in stack.servers:
        print(f"  {server.name}: pid {server.pid}, log {server.log_path}")
    return stack


def purge(stack: Stack) -> None:
    """Empty the pool's shared cache (through replica 1; the others drop it from the stream)."""
    post_json(stack.replicas[0].url + "/admin/cache/purge", {}, ADMIN)


# --- load ------------------------------------------------------------------------------------


def chat_body(model: str, system: str, question: str) -> bytes:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return orjson.dumps({"model": model, "messages": messages, "temperature": 0.2})


@dataclass
class Tally:
    """What a closed loop's answers said: x-gateway-cache of each, the first few failures."""

    cache: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def observe(self, outcome: Outcome) -> None:
        if outcome.status:
            self.cache[outcome.headers.get("x-gateway-cache", "-")] += 1
        if (outcome.error or outcome.status != 200) and len(self.failures) < 3:
            self.failures.append(outcome.error or outcome.body[:200].decode(errors="replace"))


async def load(
    session: aiohttp.ClientSession,
    url: str,
    concurrency: int,
    seconds: float,
    body: Any,
    tally: Tally | None = None,
    stop: asyncio.Event | None = None,
) -> LoadResult:
    """`concurrency` clients sending `body()` to `url` for `seconds` (or until `stop`)."""
    observe = tally.observe if tally else None
    return await closed_loop(
        session, lambda _: Request(url, body()), concurrency, seconds=seconds, stop=stop,
        observe=observe,
    )  # fmt: skip


# --- (a) throughput --------------------------------------------------------------------------


def command_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


async def measure(
    stack: Stack, client: redis.Redis, target: str, url: str, concurrency: int, opts: Options
) -> Sample:
    if target != UPSTREAM:
        await asyncio.to_thread(purge, stack)
        await asyncio.sleep(0.3)  # let every replica apply the deletions
    await wait_quiet(stack.cpu, opts.quiet_wait or 0)
    questions = UniqueQuestions(seed=hash((target, concurrency, time.time())))

    def body() -> bytes:
        return chat_body(MODEL, SYSTEM, questions.next())

    tally = Tally()
    async with session_for(concurrency) as session:
        await load(session, url, concurrency, opts.warmup or 0, body)
        cpu0, calls0, t0 = stack.cpu(), command_calls(client), time.time()
        run = await load(session, url, concurrency, opts.seconds or 0, body, tally)
        t1, calls1, cpu1 = time.time(), command_calls(client), stack.cpu()
    n = max(1, run.count)
    if tally.failures:
        print(f"    errors from {target}: {tally.failures}")
    calls = {k: v - calls0.get(k, 0) for k, v in calls1.items() if k != "info"}
    return Sample(
        **asdict(run.figures()),
        window=(t0, t1),
        cpu_ms={k: (cpu1[k] - cpu0[k]) * 1000 / n for k in cpu0},
        redis_calls={k: v / n for k, v in calls.items() if v > 0},
        cache=dict(tally.cache),
        foreign_cores=max(0.0, foreign_seconds(cpu0, cpu1) / (t1 - t0)),
    )


def gateway_cpu(s: Sample) -> float:
    return sum(v for k, v in s.cpu_ms.items() if k.startswith("gw"))


async def throughput(stack: Stack, opts: Options) -> dict[tuple[str, int], list[Sample]]:
    targets = stack.targets()
    samples: dict[tuple[str, int], list[Sample]] = {}
    client = redis.Redis.from_url(stack.redis.url)
    try:
        for round_no in range(opts.rounds or 0):
            names = list(targets)
            names = names[round_no % len(names) :] + names[: round_no % len(names)]  # rotated
            for concurrency in opts.concurrency:
                for name in names:
                    s = await measure(stack, client, name, targets[name], concurrency, opts)
                    samples.setdefault((name, concurrency), []).append(s)
                    print(
                        f"  round {round_no + 1}/{opts.rounds} c={concurrency:<3} {name:10}"
                        f" {s.rps:7.0f} req/s  p50 {s.p50_ms:6.2f} ms  p99 {s.p99_ms:7.2f} ms"
                        f"  gateway cpu {gateway_cpu(s):5.2f} ms/req"
                        f"  other work on the machine {s.foreign_cores:4.2f} cores"
                        f"  n={s.count} err={s.errors}",
                        flush=True,
                    )
    finally:
        client.close()
    return samples


# --- (b) shared cache ------------------------------------------------------------------------


def metric_counts(server: Server) -> Counter[str]:
    """gateway_cache_lookups_total of one replica, by result (summed over models)."""
    found = by_label(scrape(server.url, "gateway_cache_lookups_total"), "result")
    return Counter({result: int(n) for result, n in found.items()})


async def shared_cache(stack: Stack, opts: Options) -> dict[str, Any]:
    await asyncio.to_thread(purge, stack)
    await asyncio.sleep(0.5)
    await wait_quiet(stack.cpu, opts.quiet_wait or 0)
    questions = (FILLER + [q for q, _ in PAIRS])[: opts.pool]
    rng = random.Random(7)
    order = [rng.randrange(len(questions)) for _ in range(opts.pool_requests or 0)]
    bodies = [chat_body(MODEL, SYSTEM, q) for q in questions]
    before = {r.name: metric_counts(r) for r in stack.replicas}
    outcomes: list[Outcome] = []
    url = stack.balancers[-1].url + "/v1/chat/completions"
    async with session_for(opts.pool_concurrency) as session:
        run = await closed_loop(
            session, lambda i: Request(url, bodies[order[i]]), opts.pool_concurrency,
            count=len(order), observe=outcomes.append,
        )  # fmt: skip
    await asyncio.sleep(0.2)
    after = {r.name: metric_counts(r) for r in stack.replicas}
    errors = [o.error or f"HTTP {o.status}: {o.body[:200]!r}" for o in outcomes if o.status != 200]
    answers = [o for o in outcomes if o.status == 200]
    answers.sort(key=lambda o: o.started + o.latency_s)  # in the order they were read
    results = [  # (replica, question, x-gateway-cache) of each answer
        (o.headers.get("X-Upstream-Addr", "?"), order[o.index], cache_result(o)) for o in answers
    ]
    stored: set[tuple[str, int]] = set()  # (replica, question) it answered by a miss
    per: dict[str, Counter[str]] = {}
    for replica, question, result in results:
        c = per.setdefault(replica, Counter())
        c.update(["requests", result])
        if result.startswith("hit"):
            c["hits_from_others"] += (replica, question) not in stored
        elif result == "miss":
            stored.add((replica, question))
    rows = []
    for replica in stack.replicas:
        c = per.get(replica.url.removeprefix("http://"), Counter())
        hits = c["hit-exact"] + c["hit-semantic"]
        row = {"replica": replica.name, "requests": c["requests"], "hit_exact": c["hit-exact"]}
        row |= {"hit_semantic": c["hit-semantic"], "miss": c["miss"]}
        row["hit_rate"] = hits / c["requests"] if c["requests"] else math.nan
        row["hits_from_others"] = c["hits_from_others"]
        rows.append(row | {"metrics": dict(after[replica.name] - before[replica.name])})
    addresses = {r.url.removeprefix("http://") for r in stack.replicas}
    missed = Counter(question for _, question, result in results if result == "miss")
    # Had each replica its own cache: its first sight of a question is a miss.
    local_misses = len({(replica, question) for replica, question, _ in results})
    total, misses = len(answers), sum(missed.values())
    hit_lat = [o.latency_s for o in answers if cache_result(o).startswith("hit")]
    miss_lat = [o.latency_s for o in answers if cache_result(o) == "miss"]
    return {
        "pool": len(questions),
        "requests": total,
        "seconds": run.seconds,
        "errors": len(errors),
        "error_examples": errors[:3],
        "unknown_replicas": [r for r in per if r not in addresses],
        "rows": rows,
        "misses": misses,
        "first_misses": len(missed),
        "duplicate_misses": misses - len(missed),
        "hit_rate": 1 - misses / total if total else math.nan,
        "local_misses": local_misses,
        "local_hit_rate": 1 - local_misses / total if total else math.nan,
        "hit_p50_ms": percentile(hit_lat, 50) * 1000,
        "miss_p50_ms": percentile(miss_lat, 50) * 1000,
        "other_results": dict(Counter(r for _, _, r in results if r not in CACHE_RESULTS)),
    }


def cache_result(outcome: Outcome) -> str:
    return outcome.headers.get("x-gateway-cache", "-")


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
    write = Request(stack.writer.url + "/v1/chat/completions", chat_body(LAG_MODEL, system, first))
    poll = Request(stack.reader.url + "/v1/chat/completions", chat_body(LAG_MODEL, system, second))
    written: list[Outcome] = []
    polls: list[Outcome] = []

    async def writing() -> None:
        written.append(await send(session, write))

    async def polling() -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            polls.append(await send(session, poll))
            if "x-gateway-cache-similarity" in polls[-1].headers and written:
                return

    await asyncio.gather(writing(), polling())
    w = written[0]
    t_w = w.started + w.latency_s
    write_result = f"{w.status} {w.headers.get('x-gateway-cache', '-')}"
    poll_ms = median([p.latency_s * 1000 for p in polls])
    found = [k for k, p in enumerate(polls) if "x-gateway-cache-similarity" in p.headers]
    if not found:
        nan = math.nan
        return Probe(i, False, "-", nan, nan, nan, len(polls), poll_ms, write_result)
    seen, hit = found[0], polls[found[0]]
    lower = max(0.0, polls[seen - 1].started - t_w) * 1000 if seen else 0.0
    upper = max(0.0, hit.started + hit.latency_s - t_w) * 1000
    similarity = float(hit.headers["x-gateway-cache-similarity"] or "nan")
    result = hit.headers.get("x-gateway-cache", "-")
    return Probe(i, True, result, similarity, lower, upper, len(polls), poll_ms, write_result)


async def replication_lag(stack: Stack, opts: Options, under_load: bool) -> dict[str, Any]:
    tag = "load" if under_load else "idle"
    await wait_quiet(stack.cpu, opts.quiet_wait or 0)
    stop = asyncio.Event()
    background: list[asyncio.Task[LoadResult]] = []
    load_session = session_for(max(2, opts.lag_load))
    if under_load:
        questions = UniqueQuestions(seed=11)
        body = lambda: chat_body(LOAD_MODEL, SYSTEM, questions.next())  # noqa: E731
        per = max(1, opts.lag_load // 2)
        for server in (stack.writer, stack.reader):
            url = server.url + "/v1/chat/completions"
            coro = load(load_session, url, per, 3600, body, stop=stop)
            background.append(asyncio.create_task(coro))
        await asyncio.sleep(1.0)  # let the load settle
    probes: list[Probe] = []
    t0 = time.time()
    try:
        async with session_for(8) as session:
            for i in range(opts.lag_probes or 0):
                probes.append(await probe_once(session, stack, tag, i, opts.lag_timeout))
    finally:
        t1 = time.time()
        stop.set()
        runs = await asyncio.gather(*background)
        await load_session.close()
    seen = [p for p in probes if p.seen]
    return {
        "condition": f"under load (c={opts.lag_load})" if under_load else "idle",
        "probes": len(probes),
        "seen": len(seen),
        "semantic_hits": sum(p.result == "hit-semantic" for p in seen),
        # Probes where a poll sent after W answered still missed the entry: 0 means the lag
        # was below what the polls can resolve (upper bound ~ one poll).
        "late_misses": sum(p.lower_ms > 0 for p in seen),
        "lower_p50_ms": median([p.lower_ms for p in seen]),
        "upper_p50_ms": median([p.upper_ms for p in seen]),
        "upper_p99_ms": percentile([p.upper_ms for p in seen], 99),
        "upper_max_ms": max((p.upper_ms for p in seen), default=math.nan),
        "poll_ms": median([p.poll_ms for p in probes]),
        "load_rps": sum(r.rps for r in runs),
        "load_errors": sum(r.errors for r in runs),
        "window": (t0, t1),
        "probe_list": [asdict(p) for p in probes],
    }


# --- main ------------------------------------------------------------------------------------


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


def add_stream_lags(out: dict[str, Any], lags: StreamLags) -> None:
    """The observer's stream delivery lags in each measurement's window."""
    for s in (s for ss in out["samples"].values() for s in ss):
        window = lags.window(*s.window)
        s.stream_p50_ms = percentile(window, 50) * 1000
        s.stream_p99_ms = percentile(window, 99) * 1000
    for r in out["lags"]:
        window = lags.window(*r["window"])
        r["stream_p50_ms"] = percentile(window, 50) * 1000
        r["stream_p99_ms"] = percentile(window, 99) * 1000
        r["stream_max_ms"] = max(window, default=math.nan) * 1000
        r["stream_events"] = len(window)


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    needed = ((nginx.nginx_path(), nginx.INSTALL_HINT),)
    needed += ((redis_server.redis_server_path(), redis_server.INSTALL_HINT),)
    for found, missing in needed:
        if found is None:
            print(missing, file=sys.stderr)
            return 2
    cpus = os.cpu_count() or 1
    print(
        f"scale-out bench: {opts.rounds} round(s) of {opts.seconds:.1f} s per cell "
        f"(+{opts.warmup:.1f} s warm-up), concurrency "
        f"{','.join(map(str, opts.concurrency))}, fake upstream latency {opts.latency_ms:.0f} ms, "
        f"nginx worker_processes {opts.nginx_workers}"
    )
    tiers = "exact tier only" if opts.exact_only else "exact + semantic tiers, hash embedder"
    print(
        f"  pool replicas: cache in Redis ({tiers}), breakers in {opts.breakers}, "
        f"rate limits in Redis\n  {cpus} cpus, load average {load_average()}"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="scaleout-bench-") as tmp, ExitStack() as es:
        stack = start_stack(es, Path(tmp), opts)
        out = uvloop.run(bench(stack, opts))
        time.sleep(1.2)  # the observer flushes once a second at most
        add_stream_lags(out, StreamLags(stack.observer_file))
        problems = log_problems(stack)
    print(f"\ndone in {time.monotonic() - started:.0f} s; load average {load_average()}")
    rows = throughput_rows(out["samples"], opts.concurrency)
    if rows:
        print_throughput(rows, opts.rounds or 0)
        results = Counter[str]()
        for s in (s for (name, _), ss in out["samples"].items() if name != UPSTREAM for s in ss):
            results.update(s.cache)
        print(f"\n  x-gateway-cache over (a): {dict(results)}")
        top = max(opts.concurrency)
        breakdown = redis_breakdown(out["samples"], top)
        print(f"  Redis commands per request, replica 1 direct, c={top}: {breakdown}")
    if out["cache"]:
        print_cache(out["cache"])
    if out["lags"]:
        print_lag(out["lags"], opts.lag_probes or 0)
    if problems:
        print("\nWarnings and errors in the logs:")
        for line in problems:
            print(f"  {line}")
    if opts.json_out:
        samples = {f"{k[0]}/{k[1]}": v for k, v in out["samples"].items()}
        parts = {"cache": out["cache"], "lag": out["lags"], "log_problems": problems}
        save_json(opts.json_out, options=opts, cpus=cpus, throughput=rows, samples=samples, **parts)
    return 0


PROBLEM = re.compile(
    r'WARNING|ERROR|Traceback|"level": ?"(warning|error)"|\[(warn|error|crit|alert|emerg)\]'
)


def log_problems(stack: Stack) -> list[str]:
    """Warning and error lines of the gateways' and nginx's logs (first few of each)."""
    out = []
    logs = [
        (s.name, s.log_path) for s in stack.servers if s.name not in ("redis", "stream-observer")
    ]
    for name, path in [*logs, ("nginx", stack.dir / "nginx-error.log")]:
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace")
            lines = [line for line in text.splitlines() if PROBLEM.search(line)]
            out += [f"{name}: {line[:300]}" for line in lines[:5]]
            out += [f"{name}: ... {len(lines) - 5} more"] if len(lines) > 5 else []
    return out


if __name__ == "__main__":
    sys.exit(main())
