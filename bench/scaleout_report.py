"""What bench/scaleout.py measured, and its tables: one sample per target, concurrency and
round; the medians over rounds and paired ratios of workload (a); the shared-cache and
replication-lag tables of (b) and (c)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gateway.testing.harness.cpu import MACHINE
from gateway.testing.harness.load import RunFigures
from gateway.testing.harness.stats import fmt, median, ratio
from gateway.testing.harness.tables import markdown_table

UPSTREAM, DIRECT = "upstream", "gw1-direct"
TARGETS = (UPSTREAM, DIRECT, "nginx-1", "nginx-2", "nginx-3")  # replicas: 0, 1, 1, 2, 3


@dataclass
class Sample(RunFigures):
    """One target at one concurrency in one round."""

    window: tuple[float, float]  # wall clock (time.time()) of the measured part
    cpu_ms: dict[str, float]  # component -> CPU ms per request
    redis_calls: dict[str, float]  # Redis command -> calls per request
    cache: dict[str, int]  # x-gateway-cache -> responses
    foreign_cores: float  # cores used meanwhile by processes outside this bench
    stream_p50_ms: float = math.nan  # stream delivery lag seen by the observer, in the window
    stream_p99_ms: float = math.nan


def paired_ratio(
    samples: dict[tuple[str, int], list[Sample]], a: str, b: str, c: int, attr: str
) -> float:
    pairs = zip(samples.get((a, c), []), samples.get((b, c), []), strict=False)
    return median([ratio(getattr(x, attr), getattr(y, attr)) for x, y in pairs])


def throughput_rows(
    samples: dict[tuple[str, int], list[Sample]], concurrency: tuple[int, ...]
) -> list[dict[str, Any]]:
    rows = []
    for c in concurrency:
        for replicas, name in enumerate(TARGETS):
            ss = samples.get((name, c), [])
            if not ss:
                continue
            replicas = max(1, replicas - 1) if replicas else 0  # nginx-N: N replicas
            serving = [f"gw{n}" for n in range(1, replicas + 1)]

            def cpu(keys: list[str], ss: list[Sample] = ss) -> float:
                return median([sum(s.cpu_ms.get(k, math.nan) for k in keys) for s in ss])

            def med(value: Any, ss: list[Sample] = ss) -> float:
                return median([value(s) for s in ss])

            gateways = sorted(k for k in ss[0].cpu_ms if k.startswith("gw"))
            rows.append(
                {
                    "target": name,
                    "replicas": replicas,
                    "concurrency": c,
                    "rps": med(lambda s: s.rps),
                    "p50_ms": med(lambda s: s.p50_ms),
                    "p99_ms": med(lambda s: s.p99_ms),
                    "vs_1_replica": paired_ratio(samples, name, "nginx-1", c, "rps"),
                    "vs_direct": paired_ratio(samples, name, DIRECT, c, "rps"),
                    "cpu_ms": {
                        "serving": cpu(serving),
                        "following": cpu([k for k in gateways if k not in serving]),
                        **{k: cpu([k]) for k in ("nginx", "redis", "fake", "loadgen")},
                    },
                    "cores_busy": med(lambda s: s.cpu_ms[MACHINE] * s.rps / 1000),
                    "foreign_cores": med(lambda s: s.foreign_cores),
                    "redis_calls": med(lambda s: sum(s.redis_calls.values())),
                    "stream_p50_ms": med(lambda s: s.stream_p50_ms),
                    "stream_p99_ms": med(lambda s: s.stream_p99_ms),
                    "errors": sum(s.errors for s in ss),
                }
            )
    return rows


def print_throughput(rows: list[dict[str, Any]], rounds: int) -> None:
    print(
        f"\n(a) Throughput, unique prompts (every request a cache miss and write); medians over "
        f"{rounds} round(s), ratios paired per round.\n"
    )
    head = ("target", "replicas", "conc", "req/s", "vs nginx-1", "vs 1 direct", "p50 ms")
    head += ("p99 ms", "CPU ms/req: serving replicas", "idle replicas (following)", "nginx")
    head += ("redis", "fake", "loadgen", "cores busy (not ours)", "Redis cmds/req")
    head += ("stream lag p50/p99 ms", "errors")
    table = []
    for r in rows:
        cpu, upstream = r["cpu_ms"], r["target"] == UPSTREAM
        table.append(
            (
                "upstream (fake, direct)" if upstream else r["target"],
                r["replicas"] or "-",
                r["concurrency"],
                fmt(r["rps"], ".0f"),
                *("-" if upstream else fmt(r[k]) for k in ("vs_1_replica", "vs_direct")),
                fmt(r["p50_ms"], ".1f"),
                fmt(r["p99_ms"], ".1f"),
                "-" if upstream else fmt(cpu["serving"]),
                fmt(cpu["following"]) if r["replicas"] < 3 else "-",
                *(fmt(cpu[k]) for k in ("nginx", "redis", "fake", "loadgen")),
                f"{fmt(r['cores_busy'])} ({fmt(r['foreign_cores'])})",
                fmt(r["redis_calls"], ".1f"),
                f"{fmt(r['stream_p50_ms'], '.1f')} / {fmt(r['stream_p99_ms'], '.1f')}",
                r["errors"],
            )
        )
    print(markdown_table(head, table))
    print(
        "  CPU ms/req: each component's CPU time over the requests answered (idle replicas "
        "still apply every cache write from the stream); cores busy: the whole machine (all "
        "processes, /proc/stat), in brackets the part used by processes outside this bench; "
        "Redis cmds/req counts the commands run inside Lua scripts too."
    )


def redis_breakdown(samples: dict[tuple[str, int], list[Sample]], c: int) -> str:
    ss = samples.get((DIRECT, c), [])
    commands = sorted({k for s in ss for k in s.redis_calls})
    per = {k: median([s.redis_calls.get(k, 0.0) for s in ss]) for k in commands}
    ordered = sorted(per.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.2f}" for k, v in ordered if v >= 0.01) or "-"


def print_cache(res: dict[str, Any]) -> None:
    print(
        f"\n(b) Shared cache: {res['pool']} questions asked {res['requests']} times in random "
        f"order through nginx to 3 replicas ({res['seconds']:.1f} s, {res['errors']} errors); "
        "hash embedder, so hits are exact repeats.\n"
    )
    head = ("replica", "requests", "hit exact", "hit semantic", "miss", "hit rate")
    head += ("hits on entries another replica stored",)
    head += ("/metrics delta (hit_exact/hit_semantic/miss)",)
    table = []
    for r in res["rows"]:
        m = r["metrics"]
        others = r["hits_from_others"] / max(1, r["hit_exact"] + r["hit_semantic"])
        table.append(
            (
                *(r[k] for k in ("replica", "requests", "hit_exact", "hit_semantic", "miss")),
                f"{fmt(r['hit_rate'] * 100, '.1f')}%",
                f"{r['hits_from_others']} ({fmt(100 * others, '.0f')}% of its hits)",
                "/".join(str(m.get(k, 0)) for k in ("hit_exact", "hit_semantic", "miss")),
            )
        )
    print(markdown_table(head, table))
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


def print_lag(results: list[dict[str, Any]], probes: int) -> None:
    print(
        "\n(c) Replication lag of semantic entries: written through replica W, polled on replica R "
        "(MiniLM) until R's index holds it.\n   lag is between the bounds: the last poll that "
        "missed it was sent at 'lower', the first that found it was read at 'upper' (ms after "
        "W's answer).\n"
    )
    head = ("condition", "probes", "found", "served as semantic hit", "missed after W answered")
    head += ("lower p50 ms", "upper p50 ms", "upper p99 ms", "upper max ms", "poll ms p50")
    head += ("stream lag p50/p99/max ms", "load req/s")
    table = [
        (
            *(r[k] for k in ("condition", "probes", "seen", "semantic_hits", "late_misses")),
            *(fmt(r[k], ".1f") for k in ("lower_p50_ms", "upper_p50_ms", "upper_p99_ms")),
            *(fmt(r[k], ".1f") for k in ("upper_max_ms", "poll_ms")),
            " / ".join(fmt(r[k]) for k in ("stream_p50_ms", "stream_p99_ms", "stream_max_ms")),
            fmt(r["load_rps"], ".0f") if r["load_rps"] else "-",
        )
        for r in results
    ]
    print(markdown_table(head, table))
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
    if probes < 50:
        print("  few probes: p99 is close to the maximum.")
