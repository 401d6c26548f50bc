"""Proxy overhead: the same request mix straight to a fake upstream, through a bare aiohttp
forwarder, through the gateway and (when installed) through a peer proxy, in one run; and what
the semantic cache adds: a miss, and a semantic hit, against the gateway with the cache off.

    python bench/overhead.py                    # defaults: about 6 minutes, more with LiteLLM
    python bench/overhead.py --quick            # smoke check, about a minute
    python bench/overhead.py --generator hey    # plain/stream load from hey, not this process
    python bench/overhead.py --modes miss --profile prof/   # the miss path, with a py-spy profile
    python bench/overhead.py --gateway-commit HEAD --json a.json   # committed code only
    python bench/overhead.py --report a.json,b.json                # pool saved runs

Every server is its own process on a free loopback port. The load comes from this process
(`--generator closed`: aiohttp client on uvloop, one pooled connection per concurrent worker)
or, for the fixed plain and streamed requests, from hey in a process of its own (`hey`).
Each round runs every cell against every target back to back, rotating the target order, so
machine noise lands on all paths alike; the tables show medians across rounds. Ratios and
differences are paired within a round (target vs direct/forwarder/cache off, same cell) and
then the median is taken. CPU per request is the target process's own user + system time from
/proc (the load generator is another process), split by thread for the gateways.

Modes: `plain` and `stream` send one fixed chat request; `miss` sends a new question each
time (harness UniqueQuestions; both gateways get the same ones) to the gateway with the cache
on ("gateway-cache": default embedder, SQLite store) and off; `hit` sends rewordings of stored
questions that the cache serves as semantic hits, and the same to the gateway without cache;
`turn` is a miss in a new scope: a new question after an earlier exchange of its own, as a
conversation's later turns are (the cache scopes them by their history).
LiteLLM is measured when `--litellm PATH` is given or found at /tmp/litellm-venv/bin/litellm
(install it in its own venv: see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from itertools import cycle
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: the checkout's gateway package

import aiohttp  # noqa: E402
import uvloop  # noqa: E402
from cache_questions import PAIRS  # noqa: E402

from gateway.testing.harness import pyspy  # noqa: E402
from gateway.testing.harness.cached_gateway import (  # noqa: E402
    cache_entries,
    cache_header,
    fill,
    purge,
    semantic_hits,
    start_cached_gateway,
)
from gateway.testing.harness.configs import write_config  # noqa: E402
from gateway.testing.harness.gitrev import checkout_state, export  # noqa: E402
from gateway.testing.harness.hey import HeyRun, run_hey  # noqa: E402
from gateway.testing.harness.load import (  # noqa: E402
    JSON_HEADERS,
    LoadResult,
    Outcome,
    Request,
    RunFigures,
    closed_loop,
    session_for,
)
from gateway.testing.harness.options import listed, option, parse_options  # noqa: E402
from gateway.testing.harness.process import Server, answers, free_port  # noqa: E402
from gateway.testing.harness.procstat import (  # noqa: E402
    CpuWatch,
    load_average,
)
from gateway.testing.harness.prompts import UniqueQuestions  # noqa: E402
from gateway.testing.harness.results import save_json  # noqa: E402
from gateway.testing.harness.starters import (  # noqa: E402
    start_fake_upstream,
    start_forwarder,
    start_gateway,
)
from gateway.testing.harness.stats import fmt, median, ratio  # noqa: E402
from gateway.testing.harness.sync_http import get_json, post_json  # noqa: E402
from gateway.testing.harness.tables import markdown_table  # noqa: E402

DEFAULT_LITELLM = Path("/tmp/litellm-venv/bin/litellm")
MODEL = "bench-model"
# ~30 words, so the fake upstream streams ~30 content chunks (it streams word by word).
ANSWER = (
    "Use a 6 mm masonry bit with the drill in hammer mode, drill slightly deeper than the plug, "
    "blow out the dust, then tap the plug in flush before you drive the screw."
)
BASE_REQUEST = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": "You are a concise assistant for a hardware store."},
        {"role": "user", "content": "Which drill bit do I need for a 6 mm wall plug in brick?"},
    ],
    "temperature": 0.2,
}
BODIES = {
    "plain": json.dumps(BASE_REQUEST).encode(),
    "stream": json.dumps({**BASE_REQUEST, "stream": True}).encode(),
}
MISS, HIT = "miss", "hit"  # the cache's modes: a new question each time; a reworded one
TURN = "turn"  # a miss too: a new question after an earlier exchange of its own (a new scope)
CACHE_MODES = (MISS, TURN, HIT)
# LiteLLM refuses to start without a master key; clients then send it as a bearer token.
LITELLM_KEY = "sk-bench-master-key"
STREAM_END = b"data: [DONE]\n\n"
DIRECT, FORWARDER, GATEWAY, LITELLM = "direct", "forwarder", "gateway", "litellm"
GATEWAY_CACHE = "gateway-cache"  # the gateway with the cache on for the model
TARGET_ORDER = (DIRECT, FORWARDER, GATEWAY, GATEWAY_CACHE, LITELLM)
CACHE_TARGETS = (GATEWAY, GATEWAY_CACHE)  # the cache's modes compare these two
# The gateway's threads by OS name (gateway/util/threads.py), as the cache table shows them.
THREADS = {
    "python": "loop",
    "embed-quick": "quick",  # two-stage embedding's int8 stage
    "embed-gt-all-mi": "embedder",  # MiniLM in fp32 (two-stage: its close calls)
    "cache-store": "store",
    "gateway-cpu": "offload",
}


@dataclass
class Options:
    """Counts left at None take their --quick or full default."""

    quick: bool = option(False, "small counts, one round (smoke)")
    rounds: int | None = option(None, "rounds over every cell (default 5)")
    requests: int | None = option(None, "measured requests per cell (default 1500)")
    warmup: int | None = option(None, "warm-up requests per cell (default 150)")
    max_seconds: float | None = option(None, "cap on one measurement (default 6)")
    concurrency: tuple[int, ...] = option((1, 64), "plain and stream", parse=listed(int))
    miss_concurrency: tuple[int, ...] = option((1, 8, 32), "miss", parse=listed(int))
    modes: tuple[str, ...] = option(
        ("plain", "stream", MISS, TURN, HIT),
        "which of plain,stream,miss,turn,hit",
        parse=listed(str),
    )
    targets: tuple[str, ...] = option(
        TARGET_ORDER, "litellm only when installed", parse=listed(str)
    )
    generator: str = option(
        "closed",
        "plain and stream load: this process's closed loop, or hey (miss and hit always come "
        "from the closed loop: hey sends one fixed body)",
        choices=("closed", "hey"),
    )
    litellm: Path | None = option(None, f"litellm binary (default {DEFAULT_LITELLM} if there)")
    no_litellm: bool = option(False, "do not measure LiteLLM")
    json_out: Path | None = option(None, "also write every sample to this file", flag="--json")
    report: tuple[Path, ...] = option(
        (), "run nothing: pool earlier --json files (a.json,b.json)", parse=listed(Path)
    )
    gateway_commit: str | None = option(None, "measure gateway/ as committed at this REV")
    profile: Path | None = option(
        None, "after the rounds, run --profile-cell again under py-spy; stacks, summary here"
    )
    profile_cell: str = option(f"{GATEWAY_CACHE}/{MISS}/32", "TARGET/MODE/CONC")

    def __post_init__(self) -> None:
        quick = self.quick
        self.rounds = self.rounds or (1 if quick else 5)
        self.requests = self.requests or (200 if quick else 1500)
        self.warmup = self.warmup if self.warmup is not None else (20 if quick else 150)
        self.max_seconds = self.max_seconds or (4.0 if quick else 6.0)
        if self.no_litellm:
            self.litellm = None
        elif self.litellm is None and DEFAULT_LITELLM.exists():
            self.litellm = DEFAULT_LITELLM


@dataclass(frozen=True)
class Target:
    """Where to send chat completions for one path, and the headers it needs."""

    url: str
    pid: int  # the process the client talks to: its CPU time is counted per request
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))


@dataclass(frozen=True)
class Cell:
    mode: str
    concurrency: int


@dataclass
class Sample(RunFigures):
    """One cell against one target in one round (saved as is by --json)."""

    cpu_ms: float = math.nan  # CPU time of the target's process per request
    threads_ms: dict[str, float] = field(default_factory=dict)  # the same by thread name
    cache: dict[str, int] = field(default_factory=dict)  # x-gateway-cache headers counted


@dataclass
class Results:
    # (target, mode, concurrency) -> one Sample per round
    samples: dict[tuple[str, str, int], list[Sample]] = field(default_factory=dict)

    def add(self, target: str, cell: Cell, sample: Sample) -> None:
        self.samples.setdefault((target, cell.mode, cell.concurrency), []).append(sample)

    def get(self, target: str, cell: Cell) -> list[Sample]:
        return self.samples.get((target, cell.mode, cell.concurrency), [])

    def has(self, target: str) -> bool:
        return any(key[0] == target for key in self.samples)

    def cells(self) -> list[Cell]:
        """Every cell measured, by concurrency then mode (plain before stream)."""
        keys = {(c, m) for _, m, c in self.samples}
        return [Cell(m, c) for c, m in sorted(keys)]


# --- servers ---------------------------------------------------------------------------------


def start_litellm(workdir: Path, upstream: str, binary: Path) -> Server:
    """LiteLLM proxy with default settings, one `openai/` model pointed at the fake upstream."""
    params = {"model": f"openai/{MODEL}", "api_base": upstream, "api_key": "sk-bench-not-a-key"}
    config = write_config(
        workdir,
        {"model_list": [{"model_name": MODEL, "litellm_params": params}]},
        name="litellm.yaml",
    )
    port = free_port()
    # The local cost map only skips a startup download that cannot succeed offline.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": LITELLM_KEY}
    argv = [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    server = Server(LITELLM, argv, workdir, env)
    try:
        server.wait_ready(answers(f"http://127.0.0.1:{port}", "/health/liveliness"), 180)
    except BaseException:
        server.stop()
        raise
    return server


def start_servers(
    workdir: Path, root: Path, opts: Options, servers: list[Server]
) -> dict[str, Target]:
    """Start what `opts` asks for, appending each server to `servers` as soon as it runs; the
    gateway and the fake run from `root`. Returns the targets by name."""
    fake = start_fake_upstream(workdir, root=root)
    servers.append(fake)
    post_json(fake.url + "/_fake/config", {"defaults": {"content": ANSWER}})
    upstream = fake.url + "/v1"
    # No cache or routing section: both are off unless configured.
    config = {
        "server": {"host": "127.0.0.1", "port": 0},
        "providers": {"fake": {"type": "openai", "base_url": upstream}},
        "models": [{"name": MODEL, "provider": "fake"}],
    }
    starters: dict[str, Callable[[], Server]] = {
        FORWARDER: lambda: start_forwarder(workdir, upstream),
        GATEWAY: lambda: start_gateway(workdir, write_config(workdir, config), root=root),
        GATEWAY_CACHE: lambda: start_cached_gateway(workdir, upstream, MODEL, root=root),
    }
    binary = opts.litellm
    if LITELLM in opts.targets and binary and binary.exists():
        starters[LITELLM] = lambda: start_litellm(workdir, upstream, binary)
    elif LITELLM in opts.targets:
        print(f"litellm: skipped (not installed at {binary or DEFAULT_LITELLM}; pass --litellm)")
    targets = {DIRECT: Target(upstream, fake.pid)} if DIRECT in opts.targets else {}
    for name, start in starters.items():
        if name not in opts.targets or not any(runs_on(m, name) for m in opts.modes):
            continue
        try:
            server = start()
        except RuntimeError as exc:
            if name != LITELLM:
                raise
            print(f"litellm: skipped, it did not start: {exc}")
            continue
        servers.append(server)
        targets[name] = Target(server.url + "/v1", server.pid)
    for server in servers:
        print(f"  {server.name}: pid {server.pid}, log {server.log_path}")
    if LITELLM in targets:
        auth = {**JSON_HEADERS, "Authorization": f"Bearer {LITELLM_KEY}"}
        targets[LITELLM] = Target(targets[LITELLM].url, targets[LITELLM].pid, auth)
    return {n: Target(t.url + "/chat/completions", t.pid, t.headers) for n, t in targets.items()}


# --- load ------------------------------------------------------------------------------------


def response_ok(mode: str, status: int, body: bytes) -> bool:
    return status == 200 and (body.endswith(STREAM_END) if mode == "stream" else True)


def chat_body(question: str) -> bytes:
    """The plain request with another user question."""
    messages = [BASE_REQUEST["messages"][0], {"role": "user", "content": question}]
    return json.dumps({**BASE_REQUEST, "messages": messages}).encode()


def turn_body(earlier: str, question: str) -> bytes:
    """A conversation's second turn: the cache scopes it by the first, so no two share one."""
    messages = [
        BASE_REQUEST["messages"][0],
        {"role": "user", "content": earlier},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": question},
    ]
    return json.dumps({**BASE_REQUEST, "messages": messages}).encode()


def runs_on(mode: str, target: str) -> bool:
    """The cache's modes compare the gateway with the cache on and off; the fixed requests
    would all be hits with it on."""
    return target in CACHE_TARGETS if mode in CACHE_MODES else target != GATEWAY_CACHE


Bodies = Callable[[int], bytes]  # request number -> its body


def bodies(cell: Cell, seed: int, hits: tuple[str, ...]) -> Bodies:
    """What a cell sends: its fixed body, new questions (the same for the same seed), or the
    rewordings the cache serves as semantic hits, in turn."""
    if cell.mode == MISS:
        questions = UniqueQuestions(seed)
        return lambda _: chat_body(questions.next())
    if cell.mode == TURN:
        earlier, later = UniqueQuestions(seed), UniqueQuestions(seed + 1)
        return lambda _: turn_body(earlier.next(), later.next())
    if cell.mode == HIT:
        texts = cycle(hits)
        return lambda _: chat_body(next(texts))
    body = BODIES[cell.mode]
    return lambda _: body


def check(cell: Cell, target: str) -> Callable[[Outcome], bool]:
    if cell.mode == HIT and target == GATEWAY_CACHE:
        return lambda o: o.status == 200 and cache_header(o) == "hit-semantic"
    return lambda o: response_ok(cell.mode, o.status, o.body)


async def measure(
    name: str, target: Target, cell: Cell, opts: Options, seed: int, hits: tuple[str, ...]
) -> Sample:
    """Warm-up, then the measured run, the target's CPU time (by thread) read around it."""
    ok = check(cell, name)
    with_hey = opts.generator == "hey" and cell.mode in BODIES
    # A fresh pool per measurement: every target starts from the same (warmed) state.
    async with session_for(cell.concurrency) as session:

        async def run(body: Bodies, count: int, seconds: float) -> tuple[LoadResult, Counter[str]]:
            if with_hey:
                load = HeyRun(target.url, body(0), cell.concurrency, count, headers=target.headers)
                return await run_hey(load), Counter()
            seen: Counter[str] = Counter()

            def observe(outcome: Outcome) -> None:
                seen.update(filter(None, [cache_header(outcome)]))

            result = await closed_loop(
                session,
                lambda i: Request(target.url, body(i), target.headers),
                cell.concurrency,
                count=count,
                seconds=seconds,
                ok=ok,
                observe=observe,
            )
            return result, seen

        warm, _ = await run(
            bodies(cell, seed + 1, hits),
            max(opts.warmup, 2 * cell.concurrency),
            opts.max_seconds / 4,
        )
        count = opts.requests
        if with_hey:  # hey takes a count or a duration, not both: what the cap allows
            count = min(count, max(cell.concurrency, int(warm.rps * opts.max_seconds)))
        watch = CpuWatch(target.pid)
        result, seen = await run(bodies(cell, seed, hits), count, opts.max_seconds)
        sample = Sample(**asdict(result.figures()), cache=dict(seen))
        sample.cpu_ms, sample.threads_ms = watch.per_request(sample.count)
    return sample


async def check_target(target: Target, stats_url: str) -> str | None:
    """Each request of the mix twice; the reason the target is unusable, or None.

    Every request must reach the upstream: a proxy that answered from a cache would be
    measuring something else.
    """
    before = get_json(stats_url)["requests"]
    async with aiohttp.ClientSession() as session:
        for mode, body in [*BODIES.items(), *BODIES.items()]:
            try:
                async with session.post(target.url, data=body, headers=target.headers) as resp:
                    data = await resp.read()
            except aiohttp.ClientError as exc:
                return f"{mode}: {exc}"
            if not response_ok(mode, resp.status, data):
                return f"{mode}: HTTP {resp.status}: {data[:200]!r}"
            if mode == "plain" and json.loads(data)["choices"][0]["message"]["content"] != ANSWER:
                return f"plain: unexpected answer {data[:200]!r}"
    reached = get_json(stats_url)["requests"] - before
    if reached != 2 * len(BODIES):
        return f"{reached} of {2 * len(BODIES)} requests reached the upstream (a cache on?)"
    return None


async def usable(targets: dict[str, Target], stats_url: str) -> dict[str, Target]:
    """Drop a peer proxy that answers wrongly; a broken gateway or forwarder is fatal. (The
    gateway with the cache on is judged by its cache headers instead.)"""
    out = {}
    for name, target in targets.items():
        problem = None if name == GATEWAY_CACHE else await check_target(target, stats_url)
        if problem is None:
            out[name] = target
        elif name == LITELLM:
            print(f"litellm: skipped, bad answer: {problem}")
        else:
            raise RuntimeError(f"{name} answered wrongly: {problem}")
    return out


def base_url(target: Target) -> str:
    return target.url.removesuffix("/v1/chat/completions")


async def restock(target: Target) -> int:
    """Empty the cache and store PAIRS' questions: each round starts from the same cache (a
    miss searches every entry stored so far). The number of entries."""
    purge(base_url(target))
    async with aiohttp.ClientSession() as session:
        return await fill(session, base_url(target), [q for q, _ in PAIRS], chat_body)


async def rewordings(target: Target) -> tuple[str, ...]:
    """The rewordings of PAIRS' questions the cache serves as semantic hits (the hit mode's
    input), once they are stored."""
    async with aiohttp.ClientSession() as session:
        seen = await semantic_hits(session, base_url(target), [r for _, r in PAIRS], chat_body)
    print(f"  {seen.line(len(PAIRS))}")
    return tuple(seen.hits)


def cells(opts: Options, hits: tuple[str, ...]) -> list[Cell]:
    out = [Cell(m, c) for c in opts.concurrency for m in opts.modes if m in BODIES]
    if HIT in opts.modes and hits:  # first: the cache holds only the questions it rewords
        out.append(Cell(HIT, 1))
    for mode in (MISS, TURN):
        if mode in opts.modes:
            out += [Cell(mode, c) for c in opts.miss_concurrency]
    return out


def progress(round_no: int, opts: Options, cell: Cell, name: str, sample: Sample) -> str:
    answers = f"  {dict(sample.cache)}" if sample.cache else ""
    return (
        f"  round {round_no + 1}/{opts.rounds} {cell.mode:6} c={cell.concurrency:<3}"
        f" {name:13} p50 {sample.p50_ms:8.2f} ms  p99 {sample.p99_ms:8.2f} ms"
        f"  {sample.rps:8.1f} req/s  cpu {sample.cpu_ms:6.3f} ms/req"
        f"  n={sample.count} err={sample.errors}{answers}"
    )


async def bench(targets: dict[str, Target], stats_url: str, opts: Options) -> Results:
    targets = await usable(targets, stats_url)
    cached = targets.get(GATEWAY_CACHE)
    hits: tuple[str, ...] = ()
    results = Results()
    for round_no in range(opts.rounds):
        if cached:
            print(f"  {GATEWAY_CACHE}: emptied, {await restock(cached)} questions stored")
            hits = hits or (await rewordings(cached) if HIT in opts.modes else ())
        for index, cell in enumerate(cells(opts, hits)):
            names = [n for n in targets if runs_on(cell.mode, n)]
            seed = 1000 * round_no + 2 * index  # both gateways get the same new questions
            shift = round_no % max(1, len(names))  # rotated: each target leads a round in turn
            for name in names[shift:] + names[:shift]:
                sample = await measure(name, targets[name], cell, opts, seed, hits)
                results.add(name, cell, sample)
                print(progress(round_no, opts, cell, name, sample), flush=True)
        if cached:
            print(f"  {GATEWAY_CACHE} holds {cache_entries(base_url(cached))} entries")
    if opts.profile:
        await profile(targets, opts, hits)
    return results


async def profile(targets: dict[str, Target], opts: Options, hits: tuple[str, ...]) -> None:
    """One more run of the chosen cell (not counted) with py-spy on the target: the raw
    stacks and a summary of them in the --profile directory."""
    assert opts.profile is not None
    name, mode, concurrency = opts.profile_cell.split("/")
    cell = Cell(mode, int(concurrency))
    if name not in targets or not runs_on(mode, name) or (mode == HIT and not hits):
        print(f"profile: {opts.profile_cell} was not measured in this run, skipped")
        return
    if name == GATEWAY_CACHE:
        await restock(targets[name])  # the same cache as a round starts with
    opts.profile.mkdir(parents=True, exist_ok=True)
    out = opts.profile / f"{name}-{mode}-c{concurrency}.txt"
    with pyspy.recording(targets[name].pid, out, 2 * opts.max_seconds + 10):
        sample = await measure(name, targets[name], cell, opts, 999_000, hits)
    print(f"\nprofiled (not counted): {progress(opts.rounds - 1, opts, cell, name, sample)}")
    summary = pyspy.summary(out.read_text(), 40)
    out.with_suffix(".summary.txt").write_text(summary)
    print(f"py-spy profile of {name} in {out}; summary ({out.with_suffix('.summary.txt')}):")
    print(summary)


# --- report ----------------------------------------------------------------------------------


def paired(
    results: Results, target: str, base: str, cell: Cell, fn: Callable[[Sample, Sample], float]
) -> float:
    """Median over rounds of fn(target's sample, base's sample) from the same round."""
    pairs = zip(results.get(target, cell), results.get(base, cell), strict=False)
    return median([fn(t, b) for t, b in pairs])


@dataclass(frozen=True)
class Row:
    target: str
    mode: str
    concurrency: int
    p50_ms: float
    p99_ms: float
    rps: float
    added_p50_ms: float
    rps_vs_direct: float
    rps_vs_forwarder: float
    p99_vs_forwarder: float
    cpu_ms: float
    cpu_vs_forwarder: float
    errors: int


def row(results: Results, name: str, cell: Cell) -> Row:
    samples = results.get(name, cell)

    def vs(base: str, fn: Callable[[Sample, Sample], float]) -> float:
        return paired(results, name, base, cell, fn)

    return Row(
        target=name,
        mode=cell.mode,
        concurrency=cell.concurrency,
        p50_ms=median([s.p50_ms for s in samples]),
        p99_ms=median([s.p99_ms for s in samples]),
        rps=median([s.rps for s in samples]),
        added_p50_ms=vs(DIRECT, lambda t, b: t.p50_ms - b.p50_ms),
        rps_vs_direct=vs(DIRECT, lambda t, b: ratio(t.rps, b.rps)),
        rps_vs_forwarder=vs(FORWARDER, lambda t, b: ratio(t.rps, b.rps)),
        p99_vs_forwarder=vs(FORWARDER, lambda t, b: ratio(t.p99_ms, b.p99_ms)),
        cpu_ms=median([s.cpu_ms for s in samples]),
        cpu_vs_forwarder=vs(FORWARDER, lambda t, b: ratio(t.cpu_ms, b.cpu_ms)),
        errors=sum(s.errors for s in samples),
    )


HEADER = [
    "target",
    "mode",
    "conc",
    "p50 ms",
    "p99 ms",
    "req/s",
    "+p50 ms vs direct",
    "req/s vs direct",
    "req/s vs forwarder",
    "p99 vs forwarder",
    "CPU ms/req",
    "CPU vs forwarder",
    "errors",
]  # one column per Row field, in order


@dataclass(frozen=True)
class CacheRow:
    """A cache cell: the gateway with the cache on against it off, on the same questions."""

    mode: str
    concurrency: int
    on_cpu_ms: float
    off_cpu_ms: float
    extra_cpu_ms: float  # paired per round
    on_rps: float
    off_rps: float
    on_p50_ms: float
    off_p50_ms: float
    loop_ms: float  # the cache-on gateway's CPU per request by thread
    quick_ms: float
    embedder_ms: float
    store_ms: float
    offload_ms: float
    other_ms: float
    answers: str  # its x-gateway-cache headers, counted over the rounds


CACHE_HEADER = [
    "mode",
    "conc",
    "CPU ms/req, cache on",
    "cache off",
    "extra CPU ms/req",
    "req/s on",
    "req/s off",
    "p50 ms on",
    "p50 ms off",
    *(f"{label} ms" for label in THREADS.values()),
    "other ms",
    "answers (cache on)",
]  # one column per CacheRow field, in order
SPECS = {"rps": ".0f", "on_rps": ".1f", "off_rps": ".1f", "added_p50_ms": "+.2f"}
# other floats: .3f for CPU figures (ending in cpu_ms), .2f for the rest
SPECS |= {f"{label}_ms": ".3f" for label in [*THREADS.values(), "other"]}


def by_thread(sample: Sample) -> dict[str, float]:
    out = dict.fromkeys([*THREADS.values(), "other"], 0.0)
    for name, ms in sample.threads_ms.items():
        out[THREADS.get(name, "other")] += ms
    return out


def cache_row(results: Results, cell: Cell) -> CacheRow:
    on, off = results.get(GATEWAY_CACHE, cell), results.get(GATEWAY, cell)
    threads = [by_thread(s) for s in on]
    answers: Counter[str] = Counter()
    for sample in on:
        answers.update(sample.cache)
    return CacheRow(
        mode=cell.mode,
        concurrency=cell.concurrency,
        on_cpu_ms=median([s.cpu_ms for s in on]),
        off_cpu_ms=median([s.cpu_ms for s in off]),
        extra_cpu_ms=paired(
            results, GATEWAY_CACHE, GATEWAY, cell, lambda t, b: t.cpu_ms - b.cpu_ms
        ),
        on_rps=median([s.rps for s in on]),
        off_rps=median([s.rps for s in off]),
        on_p50_ms=median([s.p50_ms for s in on]),
        off_p50_ms=median([s.p50_ms for s in off]),
        **{f"{label}_ms": median([t[label] for t in threads]) for label in threads[0]},
        answers=", ".join(f"{k} {n}" for k, n in answers.most_common()) or "-",
    )


def table(header: list[str], rows: list[Row] | list[CacheRow]) -> str:
    def cell(name: str, value: object) -> object:
        if not isinstance(value, float):
            return value
        return fmt(value, SPECS.get(name, ".3f" if name.endswith("cpu_ms") else ".2f"))

    names = [f.name for f in fields(rows[0])] if rows else []
    return markdown_table(header, [[cell(n, getattr(r, n)) for n in names] for r in rows])


# The issues' goals for the gateway: (mode or None: any, concurrency or None: any, what, field,
# unit, limit, higher wins); the first three from the first measurement, the rest issue 17's.
GOALS = (
    (None, 1, "added p50 vs direct", "added_p50_ms", " ms", 1.0, False),
    (None, 64, "req/s vs forwarder", "rps_vs_forwarder", "x", 0.8, True),
    (None, 64, "p99 vs forwarder", "p99_vs_forwarder", "x", 1.3, False),
    ("plain", None, "CPU/req vs forwarder", "cpu_vs_forwarder", "x", 1.2, False),
    ("stream", None, "CPU/req vs forwarder", "cpu_vs_forwarder", "x", 1.25, False),
    (MISS, None, "extra CPU per miss", "extra_cpu_ms", " ms", 1.5, False),
    (TURN, None, "extra CPU per miss", "extra_cpu_ms", " ms", 1.5, False),
    (HIT, 1, "semantic hit p50", "on_p50_ms", " ms", 5.0, False),
)


def verdicts(rows: list[Row | CacheRow]) -> Iterator[str]:
    for r in rows:
        for mode, concurrency, what, name, unit, limit, higher in GOALS:
            if mode not in (None, r.mode) or concurrency not in (None, r.concurrency):
                continue
            if not hasattr(r, name) or (isinstance(r, Row) and r.target != GATEWAY):
                continue
            label = f"c={r.concurrency:<2} {r.mode:6} {what}"
            value = getattr(r, name)
            if math.isnan(value):
                yield f"SKIP  {label}: not measured"
                continue
            ok = value >= limit if higher else value <= limit
            bound = ">=" if higher else "<="
            verdict = "PASS" if ok else "FAIL"
            yield f"{verdict}  {label}: {value:.2f}{unit} (goal {bound} {limit}{unit})"


def print_report(results: Results, cells: list[Cell]) -> dict[str, list[Row] | list[CacheRow]]:
    names = [n for n in TARGET_ORDER if results.has(n)]
    rows = [
        row(results, n, c) for c in cells if c.mode in BODIES for n in names if results.get(n, c)
    ]
    cache_rows = [
        cache_row(results, c)
        for c in cells
        if c.mode in CACHE_MODES and all(results.get(n, c) for n in CACHE_TARGETS)
    ]
    rounds = max((len(v) for v in results.samples.values()), default=0)
    print(
        f"Medians over {rounds} round(s); ratios and +p50 are paired per round; "
        "CPU ms/req is the target's own process (for direct: the fake upstream).\n"
    )
    if rows:
        print(table(HEADER, rows), end="\n\n")
    if cache_rows:
        print(
            "The cache: the gateway with it on and off on the same requests (miss: a new "
            "question each time; hit: rewordings served as semantic hits); CPU by thread of "
            "the cache-on gateway (loop: threads named python, the event loop and any worker "
            "not named for the OS).\n"
        )
        print(table(CACHE_HEADER, cache_rows), end="\n\n")
    for line in verdicts([*rows, *cache_rows]):
        print(line)
    return {"rows": rows, "cache_rows": cache_rows}


def load_results(paths: tuple[Path, ...]) -> Results:
    """Samples saved by --json, the rounds of every file pooled (in file order)."""
    results = Results()
    for path in paths:
        for key, samples in json.loads(path.read_text())["samples"].items():
            target, mode, concurrency = key.split("/")
            for sample in samples:
                results.add(target, Cell(mode, int(concurrency)), Sample(**sample))
    return results


# --- main ------------------------------------------------------------------------------------


def gateway_source(rev: str | None, tmp: Path) -> tuple[Path, str]:
    """The directory to import `gateway` from, and which code that is, so results name it.
    With a revision, its gateway/ is exported: uncommitted work cannot leak into the numbers."""
    if rev is None:
        return HERE.parent, checkout_state("gateway")
    return tmp / "src", f"commit {export(rev, 'gateway', tmp / 'src')}"


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    if opts.report:
        results = load_results(opts.report)
        print_report(results, results.cells())
        return 0
    print(
        f"overhead bench: {opts.rounds} round(s), {opts.requests} requests per cell "
        f"(+{opts.warmup} warm-up, cap {opts.max_seconds:.0f} s), concurrency "
        f"{','.join(map(str, opts.concurrency))} (miss {','.join(map(str, opts.miss_concurrency))})"
        f", modes {','.join(opts.modes)}, generator {opts.generator}"
    )
    servers: list[Server] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="overhead-bench-") as tmp:
        root, source = gateway_source(opts.gateway_commit, Path(tmp))
        print(f"  code measured: {source}; {os.cpu_count()} cpus, load average {load_average()}")
        try:
            targets = start_servers(Path(tmp), root, opts, servers)
            stats_url = servers[0].url + "/_fake/stats"
            results = uvloop.run(bench(targets, stats_url, opts))
        finally:
            for server in reversed(servers):
                server.stop()
    print(f"\ndone in {time.monotonic() - started:.0f} s; load average {load_average()}")
    tables = print_report(results, results.cells())
    if opts.json_out:
        samples = {"/".join(map(str, k)): v for k, v in results.samples.items()}
        save_json(opts.json_out, options=opts, code=source, **tables, samples=samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
