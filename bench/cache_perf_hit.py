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
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

import aiohttp
from cache_questions import FILLER, PAIRS, miss_questions
from overhead import ANSWER

from gateway.testing.harness.cached_gateway import (
    ask,
    cache_header,
    fill,
    semantic_hits,
    start_cached_gateway,
)
from gateway.testing.harness.load import LoadResult, Outcome, Request, closed_loop
from gateway.testing.harness.metrics import metric_value
from gateway.testing.harness.procstat import cpu_seconds, machine_line
from gateway.testing.harness.starters import start_fake_upstream
from gateway.testing.harness.stats import median
from gateway.testing.harness.sync_http import http, post_json

MODEL = "bench-model"
SYSTEM = "You are a helpful assistant. Answer in two or three sentences."
UPSTREAM_MS = 300.0
STREAM_END = b"data: [DONE]\n\n"
HIT_P50_TARGET_MS = 15.0
SPARSE_GAP_MS = 250.0


@dataclass(frozen=True)
class Cell:
    name: str
    stream: bool
    expect: str | None  # the x-gateway-cache header a counted answer carries; None: upstream
    concurrency: int = 1
    upstream_ms: float = 0.0
    direct: bool = False  # straight to the fake upstream, not through the gateway
    gap_ms: float = 0.0  # pause before each request: sparse traffic, nothing warm in caches

    @property
    def label(self) -> str:
        return f"{self.name}, {'stream' if self.stream else 'plain'}, c={self.concurrency}"


@dataclass(frozen=True)
class Sample:
    result: LoadResult  # latencies of the counted answers; `errors`: the others
    cpu_ms: float  # the gateway process's CPU per request


@dataclass(frozen=True)
class Servers:
    fake: str  # base URL, e.g. http://127.0.0.1:PORT
    gateway: str
    gateway_pid: int


def request_body(text: str, stream: bool = False) -> bytes:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    body = {"model": MODEL, "messages": messages, "temperature": 0.2, "stream": stream}
    return json.dumps(body).encode()


def set_upstream_latency(fake_url: str, ms: float) -> None:
    # The fake replaces its defaults as a whole: the answer text is set again each time.
    post_json(fake_url + "/_fake/config", {"defaults": {"content": ANSWER, "latency_ms": ms}})


def start_servers(workdir: Path, stack: ExitStack) -> Servers:
    """Fake upstream, then the gateway with the cache on (both stopped when `stack` closes);
    returns once the gateway's semantic tier is on."""
    fake = stack.enter_context(start_fake_upstream(workdir))
    set_upstream_latency(fake.url, 0.0)
    started = time.perf_counter()
    gateway = stack.enter_context(start_cached_gateway(workdir, fake.url + "/v1", MODEL))
    print(f"gateway ready, semantic tier on after {time.perf_counter() - started:.1f} s")
    return Servers(fake.url, gateway.url, gateway.pid)


# --- load ------------------------------------------------------------------------------------


def cells() -> list[Cell]:
    out: list[Cell] = []
    sparse, slow = f"semantic hit, {SPARSE_GAP_MS:.0f} ms apart", f"{UPSTREAM_MS:.0f} ms"
    for stream in (False, True):
        out += [
            Cell("exact hit", stream, "hit-exact"),
            Cell("semantic hit", stream, "hit-semantic"),
            Cell(sparse, stream, "hit-semantic", gap_ms=SPARSE_GAP_MS),
            Cell("miss, upstream 0 ms", stream, "miss"),
            Cell(f"miss, upstream {slow}", stream, "miss", upstream_ms=UPSTREAM_MS),
            Cell(f"upstream direct, {slow}", stream, None, upstream_ms=UPSTREAM_MS, direct=True),
        ]
    return [
        *out,
        Cell("exact hit", False, "hit-exact", 32),
        Cell("semantic hit", False, "hit-semantic", 32),
    ]


def cell_load(
    cell: Cell, counts: dict[str, int], stored: list[str], hits: list[str], fresh: Iterator[str]
) -> tuple[Iterator[str], int]:
    """The questions a cell asks and how many: misses draw new questions from `fresh`."""
    if cell.expect == "hit-exact":
        return cycle(stored), counts["burst" if cell.concurrency > 1 else "hits"]
    if cell.expect == "hit-semantic":
        many = "burst" if cell.concurrency > 1 else "sparse" if cell.gap_ms else "hits"
        return cycle(hits), counts[many]
    return fresh, counts["slow" if cell.upstream_ms else "misses"]


async def run_cell(
    session: aiohttp.ClientSession, srv: Servers, cell: Cell, texts: Iterator[str], count: int
) -> Sample:
    url = (srv.fake if cell.direct else srv.gateway) + "/v1/chat/completions"

    def ok(outcome: Outcome) -> bool:
        complete = outcome.body.endswith(STREAM_END) if cell.stream else True
        return (
            outcome.status == 200
            and complete
            and (cell.direct or cache_header(outcome) == cell.expect)
        )

    cpu = cpu_seconds(srv.gateway_pid)
    result = await closed_loop(
        session,
        lambda _: Request(url, request_body(next(texts), cell.stream)),
        cell.concurrency,
        count=count,
        think_s=cell.gap_ms / 1e3,
        ok=ok,
    )
    return Sample(result, (cpu_seconds(srv.gateway_pid) - cpu) * 1e3 / max(1, count))


async def run_rounds(
    srv: Servers, rounds: int, counts: dict[str, int], stored: list[str], hits: list[str]
) -> dict[Cell, list[Sample]]:
    results: dict[Cell, list[Sample]] = {}
    fresh = iter(miss_questions())
    limits = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=limits, timeout=aiohttp.ClientTimeout(60)) as s:
        for round_no in range(rounds):
            for cell in cells():
                set_upstream_latency(srv.fake, cell.upstream_ms)
                texts, count = cell_load(cell, counts, stored, hits, fresh)
                if cell.expect != "miss":  # warm-up: misses would spend fresh questions
                    await run_cell(s, srv, cell, texts, 2 * cell.concurrency)
                sample = await run_cell(s, srv, cell, texts, count)
                results.setdefault(cell, []).append(sample)
                summary = sample.result.summary_ms()
                print(
                    f"  round {round_no + 1}: {cell.label:40s} p50 {summary.p50:8.2f} p99 "
                    f"{summary.p99:8.2f} ms  {sample.result.rps:7.1f} req/s"
                    f"  n={summary.count} wrong={sample.result.errors}",
                    flush=True,
                )
        set_upstream_latency(srv.fake, 0.0)
    return results


# --- report ----------------------------------------------------------------------------------


def summary(samples: list[Sample]) -> dict[str, float]:
    return {
        "p50": median([s.result.summary_ms().p50 for s in samples]),
        "p99": median([s.result.summary_ms().p99 for s in samples]),
        "rps": median([s.result.rps for s in samples]),
        "cpu": median([s.cpu_ms for s in samples]),
        "n": sum(s.result.count for s in samples),
        "wrong": sum(s.result.errors for s in samples),
    }


def report(results: dict[Cell, list[Sample]], rounds: int) -> None:
    print(f"\nMedians over {rounds} rounds (ms; req/s; gateway CPU ms per request):")
    print(f"{'cell':42s} {'p50':>8s} {'p99':>8s} {'req/s':>8s} {'cpu':>6s} {'n':>6s} {'wrong':>5s}")
    rows = {cell: summary(samples) for cell, samples in results.items()}
    for cell, r in rows.items():
        cpu = "" if cell.direct else f"{r['cpu']:6.2f}"
        print(
            f"{cell.label:42s} {r['p50']:8.2f} {r['p99']:8.2f} {r['rps']:8.1f} {cpu:>6s} "
            f"{r['n']:6.0f} {r['wrong']:5.0f}"
        )
    print()
    for stream in (False, True):
        mode = "stream" if stream else "plain"
        find = {c.name: r for c, r in rows.items() if c.stream == stream and c.concurrency == 1}
        slow = find[f"miss, upstream {UPSTREAM_MS:.0f} ms"]["p50"]
        direct = find[f"upstream direct, {UPSTREAM_MS:.0f} ms"]["p50"]
        sparse = f"semantic hit, {SPARSE_GAP_MS:.0f} ms apart"
        for kind in ("exact hit", "semantic hit", sparse):
            p50 = find[kind]["p50"]
            print(
                f"{mode:6s} {kind:28s} p50 {p50:6.2f} ms = {p50 / slow:.3f} of a miss through "
                f"the gateway ({slow:.1f} ms), {p50 / direct:.3f} of the upstream direct "
                f"({direct:.1f} ms)"
            )
        for kind in ("semantic hit", sparse):
            verdict = "PASS" if find[kind]["p50"] <= HIT_P50_TARGET_MS else "FAIL"
            print(f"{mode:6s} target p50 <= {HIT_P50_TARGET_MS:.0f} ms, {kind}: {verdict}")


async def breakdown(session: aiohttp.ClientSession, srv: Servers, hits: list[str], n: int) -> None:
    """Server-side mean lookup and embedding time of semantic hits, from /metrics deltas."""
    metrics = ("gateway_cache_lookup_duration_seconds", "gateway_embedding_duration_seconds")

    def scrape() -> dict[str, float]:
        text = http("GET", srv.gateway + "/metrics").body.decode()
        return {m + end: metric_value(text, m + end) for m in metrics for end in ("_sum", "_count")}

    before = scrape()
    url = srv.gateway + "/v1/chat/completions"
    for text in [*hits, *hits][:n]:
        await ask(session, url, request_body(text))
    after = scrape()
    parts = []
    for metric in metrics:
        d_sum = after[metric + "_sum"] - before[metric + "_sum"]
        d_count = after[metric + "_count"] - before[metric + "_count"]
        parts.append(f"{metric} mean {d_sum / max(d_count, 1) * 1e3:.2f} ms")
    print(f"semantic hits, server side ({n} requests, c=1): " + "; ".join(parts))


async def section_hit(args: argparse.Namespace) -> None:
    print(machine_line())
    quick = args.quick
    counts = {
        "hits": 100 if quick else 400,  # per hit cell and round
        "misses": 30 if quick else 100,  # per miss cell (upstream 0 ms) and round
        "slow": 8 if quick else 20,  # per cell with the 300 ms upstream, and round
        "burst": 480 if quick else 1600,  # the concurrency-32 cells, per round
        "sparse": 10 if quick else 40,  # the cells with a pause before each request
    }
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="cache-hit-bench-") as tmp, ExitStack() as stack:
        servers = start_servers(Path(tmp), stack)
        async with aiohttp.ClientSession() as session:
            stored = [q for q, _ in PAIRS] + FILLER
            entries = await fill(session, servers.gateway, stored, request_body)
            print(f"filled: {len(stored)} questions sent, all misses, {entries} entries stored")
            rewordings = await semantic_hits(
                session, servers.gateway, [t for _, t in PAIRS], request_body
            )
            print(rewordings.line(len(PAIRS)))
            hits = rewordings.hits
            await breakdown(session, servers, hits, 200)
        report(await run_rounds(servers, rounds, counts, stored, hits), rounds)
