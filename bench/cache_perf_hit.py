"""Section "hit" of bench/cache_perf.py: cache hits end to end through the gateway.

The fake upstream and the gateway run as subprocesses on loopback ports (gateway config in a
temp dir: one `openai` provider at the fake, one model with the cache on, SQLite store in the
temp dir, the default embedder). Once /readyz says the semantic tier is on, the cache gets
200 distinct questions (bench/cache_questions.py) and each prepared rewording is sent once:
those answered as `hit-semantic` are the semantic cells' input. Then, in rounds, one client
at a time sends exact repeats, those rewordings (back to back, and 250 ms apart: sparse
traffic finds the model and the store cold), fresh questions (misses) with the upstream
answering at once and after 300 ms, and the same 300 ms upstream called directly; plain and
streamed. Last, 32 concurrent clients send exact, then semantic hits. A response counts only
if its `x-gateway-cache` header is the one the cell expects; the table shows medians over
rounds and the gateway process's CPU time per request (steadier than latency on shared cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

import aiohttp
from cache_questions import FILLER, PAIRS, miss_questions
from overhead import ANSWER, Workspace
from procs import Server, cpu_seconds, percentile, post_json

MODEL = "bench-model"
SYSTEM = "You are a helpful assistant. Answer in two or three sentences."
ADMIN_KEY = "bench-admin-key"
UPSTREAM_MS = 300.0
STREAM_END = b"data: [DONE]\n\n"
HIT_P50_TARGET_MS = 15.0
SPARSE_GAP_MS = 250.0


@dataclass(frozen=True)
class Options:
    rounds: int
    hits: int  # requests per hit cell and round
    misses: int  # per miss cell (upstream 0 ms) and round
    slow: int  # per cell with the 300 ms upstream, and round
    burst: int  # requests of the concurrency-32 cells, per round
    sparse: int  # requests of the cells with a pause before each request, per round


@dataclass(frozen=True)
class Cell:
    name: str
    stream: bool
    expect: str | None  # the x-gateway-cache header a counted answer carries; None: upstream
    concurrency: int = 1
    upstream_ms: float = 0.0
    direct: bool = False  # straight to the fake upstream, not through the gateway
    gap_ms: float = 0.0  # pause before each request: sparse traffic, nothing warm in caches


@dataclass
class Sample:
    latencies: list[float]  # ms, counted answers only
    wrong: int  # answers with another cache header, or failed
    seconds: float
    cpu_ms: float  # the gateway process's CPU per request

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else math.nan


@dataclass
class Servers:
    fake: str  # base URL, e.g. http://127.0.0.1:PORT
    gateway: str
    gateway_pid: int


def request_body(text: str, stream: bool) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            "temperature": 0.2,
            "stream": stream,
        }
    ).encode()


# --- servers ---------------------------------------------------------------------------------


def gateway_config(ws: Path, upstream: str) -> Path:
    config = ws / "gateway.yaml"
    config.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"
        "providers:\n"
        f"  fake: {{type: openai, base_url: '{upstream}'}}\n"
        "models:\n"
        f"  - {{name: {MODEL}, provider: fake, cache: {{enabled: true}}}}\n"
        "cache:\n"
        f"  store: {{type: sqlite, path: '{ws / 'cache.sqlite3'}'}}\n"
    )
    return config


def get_json(url: str, headers: dict[str, str] | None = None) -> dict[str, object] | None:
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=5) as resp:
            data: dict[str, object] = json.loads(resp.read())
            return data
    except (OSError, ValueError):
        return None


def semantic_ready(base: str) -> str | None:
    state = get_json(base + "/readyz")
    cache = state.get("cache") if state else None
    return base if isinstance(cache, dict) and cache.get("semantic") else None


def start_servers(ws: Workspace, servers: list[Server]) -> Servers:
    """Fake upstream, then the gateway; returns once its embedder has loaded."""
    fake = ws.python("fake-upstream", "-m", "gateway.testing.fake_upstream", "--port", "0")
    servers.append(fake)
    fake_url = fake.wait_ready(fake.log_url, 30)
    set_upstream_latency(fake_url, 0.0)
    config = gateway_config(ws.dir, fake_url + "/v1")
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", "0"]
    # The admin key opens /admin/cache/stats, read to know when the fill's stores landed.
    env = {"PYTHONPATH": str(ws.gateway_root), "GATEWAY_ADMIN_KEY": ADMIN_KEY}
    gw = Server("gateway", argv, ws.dir, env)
    servers.append(gw)
    base = gw.wait_ready(gw.log_url, 60)
    started = time.perf_counter()
    gw.wait_ready(lambda: semantic_ready(base), 180)
    print(f"gateway ready, semantic tier on after {time.perf_counter() - started:.1f} s more")
    return Servers(fake_url, base, gw.proc.pid)


def set_upstream_latency(fake_url: str, ms: float) -> None:
    # The fake replaces its defaults as a whole: the answer text is set again each time.
    post_json(fake_url + "/_fake/config", {"defaults": {"content": ANSWER, "latency_ms": ms}})


def cache_entries(base: str) -> int:
    stats = get_json(base + "/admin/cache/stats", {"Authorization": f"Bearer {ADMIN_KEY}"})
    entries = stats.get("entries") if stats else None
    return entries if isinstance(entries, int) else -1


# --- load ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    ms: float
    cache: str | None  # the x-gateway-cache header
    similarity: float  # x-gateway-cache-similarity, nan when absent
    ok: bool  # HTTP 200 and, for a stream, complete


async def send(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> Answer:
    """One request, its body read to the end."""
    started = time.perf_counter()
    try:
        async with session.post(
            url, data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            data = await resp.read()
            ms = (time.perf_counter() - started) * 1e3
            similarity = float(resp.headers.get("x-gateway-cache-similarity", "nan"))
            ok = resp.status == 200 and (data.endswith(STREAM_END) if stream else True)
            return Answer(ms, resp.headers.get("x-gateway-cache"), similarity, ok)
    except (TimeoutError, aiohttp.ClientError):
        return Answer(math.nan, None, math.nan, False)


async def run_cell(
    session: aiohttp.ClientSession,
    url: str,
    cell: Cell,
    bodies: Iterator[bytes],
    count: int,
    pid: int,
) -> Sample:
    """`count` requests from `cell.concurrency` workers, each taking the next body."""
    latencies: list[float] = []
    wrong = 0
    issued = 0

    async def worker() -> None:
        nonlocal wrong, issued
        while issued < count:
            issued += 1
            if cell.gap_ms:
                await asyncio.sleep(cell.gap_ms / 1e3)
            answer = await send(session, url, next(bodies), cell.stream)
            if answer.ok and (cell.direct or answer.cache == cell.expect):
                latencies.append(answer.ms)
            else:
                wrong += 1

    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cell.concurrency)))
    seconds = time.perf_counter() - started
    cpu_ms = (cpu_seconds(pid) - cpu) * 1e3 / max(1, count)
    return Sample(latencies, wrong, seconds, cpu_ms)


async def fill(session: aiohttp.ClientSession, srv: Servers, texts: list[str]) -> None:
    url = srv.gateway + "/v1/chat/completions"
    headers = [(await send(session, url, request_body(t, False), False)).cache for t in texts]
    misses = headers.count("miss")
    # Stores run in the background after each answer: wait until they have all landed.
    deadline = time.monotonic() + 30
    while cache_entries(srv.gateway) < misses and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    print(
        f"filled: {len(texts)} questions sent, {misses} misses, "
        f"{cache_entries(srv.gateway)} entries stored"
    )
    if misses != len(texts):
        raise RuntimeError(f"fill: expected only misses, got {sorted(set(headers), key=str)}")


async def probe_paraphrases(session: aiohttp.ClientSession, srv: Servers) -> list[str]:
    """Each rewording once: the ones served as semantic hits are the semantic cells' input."""
    url = srv.gateway + "/v1/chat/completions"
    hits: list[str] = []
    similarity: list[float] = []
    others: dict[str, int] = {}
    for _, text in PAIRS:
        answer = await send(session, url, request_body(text, False), False)
        if answer.cache == "hit-semantic":
            hits.append(text)
            similarity.append(answer.similarity)
        else:
            others[str(answer.cache)] = others.get(str(answer.cache), 0) + 1
    print(
        f"paraphrases served as hit-semantic: {len(hits)} of {len(PAIRS)} (similarity min "
        f"{min(similarity, default=math.nan):.3f}, median {median(similarity):.3f}); "
        f"others: {others}"
    )
    return hits


# --- cells -----------------------------------------------------------------------------------


def cells() -> list[Cell]:
    out: list[Cell] = []
    for stream in (False, True):
        out += [
            Cell("exact hit", stream, "hit-exact"),
            Cell("semantic hit", stream, "hit-semantic"),
            Cell(
                f"semantic hit, {SPARSE_GAP_MS:.0f} ms apart",
                stream,
                "hit-semantic",
                gap_ms=SPARSE_GAP_MS,
            ),
            Cell("miss, upstream 0 ms", stream, "miss"),
            Cell(f"miss, upstream {UPSTREAM_MS:.0f} ms", stream, "miss", upstream_ms=UPSTREAM_MS),
            Cell(
                f"upstream direct, {UPSTREAM_MS:.0f} ms",
                stream,
                None,
                upstream_ms=UPSTREAM_MS,
                direct=True,
            ),
        ]
    out += [
        Cell("exact hit", False, "hit-exact", 32),
        Cell("semantic hit", False, "hit-semantic", 32),
    ]
    return out


def cell_load(
    cell: Cell, opts: Options, stored: list[str], hits: list[str], fresh: Iterator[str]
) -> tuple[Iterator[bytes], int]:
    """The bodies a cell sends and how many: misses draw new questions from `fresh`."""
    if cell.expect == "hit-exact":
        texts: Iterator[str] = cycle(stored)
        count = opts.burst if cell.concurrency > 1 else opts.hits
    elif cell.expect == "hit-semantic":
        texts = cycle(hits)
        count = opts.burst if cell.concurrency > 1 else opts.sparse if cell.gap_ms else opts.hits
    else:
        texts = fresh
        count = opts.slow if cell.upstream_ms else opts.misses
    return (request_body(t, cell.stream) for t in texts), count


async def run_rounds(
    srv: Servers, opts: Options, stored: list[str], hits: list[str]
) -> dict[Cell, list[Sample]]:
    results: dict[Cell, list[Sample]] = {}
    fresh = iter(miss_questions())
    limits = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=limits, timeout=aiohttp.ClientTimeout(60)) as s:
        for round_no in range(opts.rounds):
            for cell in cells():
                set_upstream_latency(srv.fake, cell.upstream_ms)
                url = (srv.fake if cell.direct else srv.gateway) + "/v1/chat/completions"
                bodies, count = cell_load(cell, opts, stored, hits, fresh)
                if cell.expect != "miss":  # warm-up: misses would spend fresh questions
                    await run_cell(s, url, cell, bodies, 2 * cell.concurrency, srv.gateway_pid)
                sample = await run_cell(s, url, cell, bodies, count, srv.gateway_pid)
                results.setdefault(cell, []).append(sample)
                print(
                    f"  round {round_no + 1}: {label(cell):40s} p50 "
                    f"{percentile_ms(sample.latencies, 50):8.2f} p99 "
                    f"{percentile_ms(sample.latencies, 99):8.2f} ms  {sample.rps:7.1f} req/s"
                    f"  n={len(sample.latencies)} wrong={sample.wrong}",
                    flush=True,
                )
        set_upstream_latency(srv.fake, 0.0)
    return results


def percentile_ms(values: list[float], q: float) -> float:
    return percentile([v / 1e3 for v in values], q)  # procs.percentile takes seconds


def label(cell: Cell) -> str:
    return f"{cell.name}, {'stream' if cell.stream else 'plain'}, c={cell.concurrency}"


# --- report ----------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def summary(samples: list[Sample]) -> dict[str, float]:
    return {
        "p50": median([percentile_ms(s.latencies, 50) for s in samples]),
        "p99": median([percentile_ms(s.latencies, 99) for s in samples]),
        "rps": median([s.rps for s in samples]),
        "cpu": median([s.cpu_ms for s in samples]),
        "n": sum(len(s.latencies) for s in samples),
        "wrong": sum(s.wrong for s in samples),
    }


def report(results: dict[Cell, list[Sample]], opts: Options) -> None:
    print(f"\nMedians over {opts.rounds} rounds (ms; req/s; gateway CPU ms per request):")
    print(f"{'cell':42s} {'p50':>8s} {'p99':>8s} {'req/s':>8s} {'cpu':>6s} {'n':>6s} {'wrong':>5s}")
    rows = {cell: summary(samples) for cell, samples in results.items()}
    for cell, r in rows.items():
        cpu = "" if cell.direct else f"{r['cpu']:6.2f}"
        print(
            f"{label(cell):42s} {r['p50']:8.2f} {r['p99']:8.2f} {r['rps']:8.1f} {cpu:>6s} "
            f"{r['n']:6.0f} {r['wrong']:5.0f}"
        )
    print()
    for stream in (False, True):
        mode = "stream" if stream else "plain"
        find = {c.name: r for c, r in rows.items() if c.stream == stream and c.concurrency == 1}
        slow = find[f"miss, upstream {UPSTREAM_MS:.0f} ms"]["p50"]
        direct = find[f"upstream direct, {UPSTREAM_MS:.0f} ms"]["p50"]
        for kind in ("exact hit", "semantic hit", f"semantic hit, {SPARSE_GAP_MS:.0f} ms apart"):
            p50 = find[kind]["p50"]
            print(
                f"{mode:6s} {kind:28s} p50 {p50:6.2f} ms = {p50 / slow:.3f} of a miss through "
                f"the gateway ({slow:.1f} ms), {p50 / direct:.3f} of the upstream direct "
                f"({direct:.1f} ms)"
            )
        for kind in ("semantic hit", f"semantic hit, {SPARSE_GAP_MS:.0f} ms apart"):
            sem = find[kind]["p50"]
            verdict = "PASS" if sem <= HIT_P50_TARGET_MS else "FAIL"
            print(f"{mode:6s} target p50 <= {HIT_P50_TARGET_MS:.0f} ms, {kind}: {verdict}")


def scrape(base: str) -> dict[str, float]:
    """Sums and counts of the gateway's lookup and embedding histograms."""
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith(
            ("gateway_cache_lookup_duration_seconds_", "gateway_embedding_duration_seconds_")
        ) and name.endswith(("_sum", "_count")):
            out[name] = float(value)
    return out


async def breakdown(session: aiohttp.ClientSession, srv: Servers, hits: list[str], n: int) -> None:
    """Server-side mean lookup and embedding time of semantic hits, from /metrics deltas."""
    before = scrape(srv.gateway)
    url = srv.gateway + "/v1/chat/completions"
    for text in [*hits, *hits][:n]:
        await send(session, url, request_body(text, False), False)
    after = scrape(srv.gateway)
    parts = []
    for metric in ("gateway_cache_lookup_duration_seconds", "gateway_embedding_duration_seconds"):
        d_sum = after.get(metric + "_sum", 0) - before.get(metric + "_sum", 0)
        d_count = after.get(metric + "_count", 0) - before.get(metric + "_count", 0)
        parts.append(f"{metric} mean {d_sum / max(d_count, 1) * 1e3:.2f} ms")
    print(f"semantic hits, server side ({n} requests, c=1): " + "; ".join(parts))


def machine() -> str:
    return (
        f"date {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {os.cpu_count()} "
        f"cores, python {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
    )


async def section_hit(args: argparse.Namespace) -> None:
    print(machine())
    quick = args.quick
    opts = Options(
        rounds=1 if quick else 3,
        hits=100 if quick else 400,
        misses=30 if quick else 100,
        slow=8 if quick else 20,
        burst=480 if quick else 1600,
        sparse=10 if quick else 40,
    )
    root = Path(__file__).resolve().parent.parent
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="cache-hit-bench-") as tmp:
        ws = Workspace(Path(tmp), root)
        try:
            srv = start_servers(ws, servers)
            async with aiohttp.ClientSession() as session:
                stored = [q for q, _ in PAIRS] + FILLER
                await fill(session, srv, stored)
                hits = await probe_paraphrases(session, srv)
                await breakdown(session, srv, hits, 200)
            results = await run_rounds(srv, opts, stored, hits)
            report(results, opts)
        finally:
            for server in reversed(servers):
                server.stop()
