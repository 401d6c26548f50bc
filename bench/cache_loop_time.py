"""Event-loop time a cache lookup costs (issue 15: p99 <= 1 ms per lookup for 2 kB questions).

The cache is built as the gateway builds it at the shipped defaults (as
tests/cache/traps/test_traps.py does: memory store, the packaged all-MiniLM-L6-v2 embedder on
ONNX Runtime, its calibrated threshold). For each question size (200 B, 2 kB, 8 kB) one scope
is pre-filled with a few thousand entries of similar questions (one template, other numbers:
cosines of 0.95 and more, so the semantic tier reads its 4 best candidates and the near-miss
guards must compare each; the numbers differ, so every candidate is refused and the lookup is
a miss, the costliest path). Then lookups of new variants run 8 at a time, each
`cache.prepare` + `cache.lookup` as the pipeline calls them, in its own task.

**How loop time is measured** (gateway/testing/harness/loop_time.py): every callback the loop
runs is timed and charged to the lookup whose context it runs in (each lookup task gets a
context carrying its number). So for every lookup we have its synchronous steps (the time it
held the loop: "per-step blocking") and their sum ("loop time per lookup", the issue's
figure). A step's wall time includes any wait for the GIL while a worker thread (the guards'
offload thread, the embedder's) holds it: that is loop blocking too; the loop thread's own CPU
time in those steps is reported beside it, which tells work on the loop from waiting (for the
GIL, or for a core on a busy machine). Callbacks outside any lookup (executor-result
hand-offs, the embedder's batcher) are summed apart as "other" and reported per lookup. This
needs the pure-Python event loop (uvloop's callbacks run in C), so absolute figures are the
stdlib loop's; the cache's own Python code costs the same on both. Chosen over
`loop.slow_callback_duration` (debug mode logs only callbacks over a bar, and slows every
callback) and over a Task factory (C tasks do not expose their steps).

Alongside, a ticker sleeps 1 ms in a loop and records how late it wakes: what any other
request on the loop would feel. A baseline phase, with the cache stage replaced by a
no-op `await asyncio.sleep(0)`, runs in the same process, interleaved with the cache phases
round by round, and gives the floor of both figures on this machine.

Two modes: `default`, the shipped policy (a last turn longer than the embedder's 128-token
window gets the exact tier only, so 2 kB and 8 kB questions never reach the guards), and
`forced-semantic`, which lifts that bar (an embedder wrapper whose `fits` says yes, and
`semantic_max_chars` at its maximum): what a semantic lookup of a long question would cost
(the guards compare at most 4,096 characters, so 8 kB pairs are "too-long" unread).

    python bench/cache_loop_time.py [--quick] [--entries N] [--lookups N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

import gateway  # noqa: E402, F401  (first, as in the server: it sets single-threaded BLAS)
from gateway.cache.factory import build_cache, new_embedder  # noqa: E402
from gateway.cache.service import SemanticCache  # noqa: E402
from gateway.cache.store import CacheEntry  # noqa: E402
from gateway.config import CacheConfig, ModelRoute  # noqa: E402
from gateway.config.cache import CachePolicyOverride  # noqa: E402
from gateway.context import RequestContext  # noqa: E402
from gateway.testing.harness.loop_time import (  # noqa: E402
    UNCOUNTED,
    StepTimer,
    charged_to,
    ticker,
)
from gateway.testing.harness.stats import median, percentile  # noqa: E402
from gateway.wire import chat_completion, usage  # noqa: E402

SIZES = {"200 B": 200, "2 kB": 2048, "8 kB": 8192}
CONCURRENCY = 8
TARGET_MS = 1.0  # issue 15: loop time per lookup, p99, 2 kB questions
ANSWER = chat_completion(
    "m", {"role": "assistant", "content": "A cached answer."}, "stop", usage(9, 3)
)

# ---------------------------------------------------------------- questions

_SERVICES = [
    "checkout",
    "search",
    "billing",
    "inventory",
    "notifications",
    "auth",
    "recommendations",
    "shipping",
    "reviews",
    "analytics",
    "media",
    "pricing",
]


def question(size: int, rng: random.Random) -> str:
    """A question of about `size` characters: one template, its numbers drawn from `rng`.

    The opening and the closing ask carry the numbers that vary from one question to the
    next (what the embedder reads first, what the guards find differ); a long question's
    middle is a description of the services, the same in every question of that size."""
    team, services, budget = rng.randint(3, 60), rng.randint(4, 90), rng.randint(2, 400) * 100
    head = (
        f"My team of {team} engineers runs {services} services on Kubernetes"
        f" 1.{rng.randint(20, 30)} in two regions. How should we size the node pool if"
        f" each service needs about {rng.randint(1, 16)} CPU cores at peak?"
    )
    ask = f" Our budget is ${budget} a month; what would you change first?"
    if size <= 300:
        return head + ask
    lines: list[str] = []
    fixed = random.Random(size)  # the same middle for every question of this size
    k = 0
    while len(head) + len(ask) + sum(len(x) for x in lines) < size - 140:
        name = _SERVICES[k % len(_SERVICES)]
        lines.append(
            f" The {name} service (version {k // len(_SERVICES) + 1}) handles about"
            f" {fixed.randint(50, 5000)} requests per second with a p99 latency of"
            f" {fixed.randint(5, 900)} ms, keeps {fixed.randint(1, 64)} GB of memory and"
            f" talks to {fixed.choice(['Postgres', 'Redis', 'Kafka', 'S3', 'Elasticsearch'])}."
        )
        k += 1
    return head + "".join(lines) + ask


# ---------------------------------------------------------------- the cache


class AlwaysFits:
    """The embedder, claiming that every text fits its window (forced-semantic mode)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fits(self, text: str) -> bool:
        return True


@dataclass
class Bench:
    cache: SemanticCache
    routes: dict[str, ModelRoute]
    embedder: Any
    next_id: int = 1
    outcomes: dict[tuple[str, str], Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )


def _body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


async def build() -> Bench:
    config = CacheConfig.model_validate(
        {
            "store": {"type": "memory"},
            "embedder": {"type": "minilm"},
            "defaults": {"enabled": True},
        }
    )
    default = ModelRoute("m", "p", "m", "chat", config.policy_for(CachePolicyOverride()))
    forced = ModelRoute(
        "m", "p", "m", "chat", config.policy_for(CachePolicyOverride(semantic_max_chars=100_000))
    )
    cache = build_cache(config, [default])
    assert cache is not None
    cache.embedder = new_embedder(config.embedder)  # one of its own, on this loop
    await cache.start()
    await cache.wait_ready()
    assert cache.embedder_ready, cache.embedder_error
    return Bench(cache, {"default": default, "forced-semantic": forced}, cache.embedder)


async def prefill(bench: Bench, size_name: str, texts: list[str]) -> None:
    """Entries in one scope (tenant `size_name`), with vectors, as `keep` would publish them."""
    route = bench.routes["default"]
    vectors = await bench.embedder.embed_many(texts)
    now = time.time()
    for text, vector in zip(texts, vectors, strict=True):
        ctx = RequestContext(request_id="fill", endpoint="chat", tenant=size_name)
        plan = bench.cache.plan(ctx, route, _body(text), "default")
        assert plan is not None
        entry = CacheEntry(
            scope=plan.key.scope,
            exact_key=plan.key.exact,
            tenant=plan.key.tenant,
            model=plan.key.model,
            text=plan.key.text,
            response=ANSWER,
            expires_at=now + 86_400,
            vector=vector,
            embedder=bench.embedder.name,
        )
        bench.cache.store.publish(entry)
        await bench.cache.store.put(entry)  # durable (committed), as keep's background write


# ---------------------------------------------------------------- one phase


@dataclass
class PhaseResult:
    steps: list[float] = field(default_factory=list)  # every step of every lookup, s
    per_lookup: list[float] = field(default_factory=list)  # sum of a lookup's steps, s
    cpu: list[float] = field(default_factory=list)  # the loop thread's CPU in them, s
    wall: list[float] = field(default_factory=list)  # a lookup's latency, s
    lateness: list[float] = field(default_factory=list)  # ticker, s
    other: float = 0.0  # loop time outside lookups, s
    other_max: float = 0.0
    lookups: int = 0

    def add(self, other: PhaseResult) -> None:
        self.steps += other.steps
        self.per_lookup += other.per_lookup
        self.cpu += other.cpu
        self.wall += other.wall
        self.lateness += other.lateness
        self.other += other.other
        self.other_max = max(self.other_max, other.other_max)
        self.lookups += other.lookups


async def phase(
    bench: Bench, timer: StepTimer, mode: str, size_name: str, queries: list[str]
) -> PhaseResult:
    loop = asyncio.get_running_loop()
    cache = bench.cache
    cache.embedder = AlwaysFits(bench.embedder) if mode == "forced-semantic" else bench.embedder
    route = bench.routes.get(mode)
    outcome = bench.outcomes[(size_name, mode)]
    wall: list[float] = []

    async def lookup(text: str) -> None:
        t0 = time.perf_counter()
        if route is None:  # baseline: the cache stage is a no-op await
            await asyncio.sleep(0)
        else:
            ctx = RequestContext(request_id="q", endpoint="chat", tenant=size_name)
            body = _body(text)
            ctx.body_bytes = len(text) + 60
            plan = await cache.prepare(ctx, route, body, "default")
            assert plan is not None
            await cache.lookup(ctx, plan)
            outcome[
                f"{ctx.cache_result}"
                + (f" ({ctx.cache_near_miss})" if ctx.cache_near_miss else "")
                + (f" [{ctx.cache_exact_only}]" if ctx.cache_exact_only else "")
            ] += 1
        wall.append(time.perf_counter() - t0)

    pending = list(queries)

    async def worker() -> None:
        while pending:
            text = pending.pop()
            number = bench.next_id
            bench.next_id += 1
            await loop.create_task(lookup(text), context=charged_to(number))

    stop, lateness = asyncio.Event(), []
    gc.collect()
    await asyncio.sleep(0)  # the collection stays out of the measured steps
    timer.reset()
    tick = loop.create_task(ticker(stop, lateness), context=charged_to(UNCOUNTED))
    await asyncio.sleep(0.01)  # the ticker's first wake-ups
    lateness.clear()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    stop.set()
    await tick
    res = PhaseResult(wall=wall, lateness=lateness, lookups=len(queries))
    for number, durations in timer.steps.items():
        res.steps += durations
        res.per_lookup.append(sum(durations))
        res.cpu.append(timer.cpu[number])
    res.other, res.other_max = timer.other, timer.other_max
    return res


# ---------------------------------------------------------------- report


def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    p50, p99 = percentile(xs, 50) * 1e3, percentile(xs, 99) * 1e3
    return f"{p50:.3f} / {p99:.3f} / {max(xs) * 1e3:.2f}"


def report(results: dict[tuple[str, str], PhaseResult], bench: Bench) -> None:
    print(
        "\n| size | mode | lookups | per step p50 / p99 / max ms | loop time per lookup"
        " p50 / p99 / max ms | of it loop-thread CPU p50 / p99 / max ms | other loop ms per"
        " lookup | ticker lateness p50 / p99 / max ms | lookup latency p50 ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (size_name, mode), res in results.items():
        other = res.other / max(res.lookups, 1) * 1e3
        wall = median(res.wall) * 1e3
        print(
            f"| {size_name} | {mode} | {res.lookups} | {_ms(res.steps)} | {_ms(res.per_lookup)}"
            f" | {_ms(res.cpu)} | {other:.3f} (max {res.other_max * 1e3:.2f}) | {_ms(res.lateness)}"
            f" | {wall:.2f} |"
        )
    print("\nOutcomes (cache result, first near-miss reason, exact-only cause):")
    for (size_name, mode), counts in bench.outcomes.items():
        print(f"  {size_name:6} {mode:16} {dict(counts.most_common())}")
    print()
    for (size_name, mode), res in results.items():
        if size_name == "2 kB" and mode != "baseline" and res.per_lookup:
            p99 = percentile(res.per_lookup, 99) * 1e3
            verdict = "PASS" if p99 <= TARGET_MS else "FAIL"
            print(
                f"target (2 kB, {mode}): loop time per lookup p99 {p99:.3f} ms <= 1 ms: {verdict}"
            )


# ---------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> int:
    bench = await build()
    rng = random.Random(15)
    queries: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    for size_name, size in SIZES.items():
        stored = list(dict.fromkeys(question(size, rng) for _ in range(args.entries)))
        await prefill(bench, size_name, stored)
        seen = set(stored)
        fresh: list[str] = []
        while len(fresh) < args.lookups * args.rounds:
            q = question(size, rng)
            if q not in seen:
                seen.add(q)
                fresh.append(q)
        queries[size_name] = fresh
        lengths = [len(q) for q in fresh]
        print(
            f"{size_name}: {len(stored)} entries in one scope, questions of"
            f" {min(lengths)}-{max(lengths)} characters",
            file=sys.stderr,
        )
    print(f"pre-filled in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    gc.freeze()  # as the gateway does after start-up (long-lived objects out of the collector)

    # Warm-up: load the ONNX session's first batches, the guards' word tables.
    warm = StepTimer()
    for size_name in SIZES:
        for mode in ("default", "forced-semantic"):
            await phase(bench, warm, mode, size_name, [question(SIZES[size_name], rng)] * 16)
    bench.outcomes.clear()

    timer = StepTimer()
    results: dict[tuple[str, str], PhaseResult] = {}
    modes = ("baseline", "default", "forced-semantic")
    try:
        with timer.installed():
            for r in range(args.rounds):
                for size_name in SIZES:
                    chunk = queries[size_name][r * args.lookups : (r + 1) * args.lookups]
                    order = modes if r % 2 == 0 else modes[::-1]
                    for mode in order:
                        res = await phase(bench, timer, mode, size_name, chunk)
                        results.setdefault((size_name, mode), PhaseResult()).add(res)
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        await bench.cache.close()
        await bench.embedder.close()
    ordered = {(s, m): results[(s, m)] for s in SIZES for m in modes}
    report(ordered, bench)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 entries, 80 lookups, 2 rounds")
    ap.add_argument("--entries", type=int, default=3000, help="pre-filled entries per size")
    ap.add_argument("--lookups", type=int, default=200, help="lookups per phase and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.quick:
        args.entries, args.lookups, args.rounds = 500, 80, 2
    load = os.getloadavg()[0]
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    print(
        f"# cache loop time (load average {load:.1f}, {os.cpu_count()} cores,"
        f" OPENBLAS_NUM_THREADS {blas}, {args.entries} entries per size)"
    )
    coro: Coroutine[Any, Any, int] = run(args)
    return asyncio.run(coro)


if __name__ == "__main__":
    sys.exit(main())
