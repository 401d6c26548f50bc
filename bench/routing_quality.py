"""Routing quality: how many GSM8K prompts the complexity score can send to the cheap model.

Each of the 1,319 GSM8K prompts of ../shared/datasets/routing/gsm8k_responses.csv (RouteLLM:
whether Mixtral-8x7B and GPT-4-1106 answered correctly) is scored as the gateway scores a
request, with a scoring profile (`--profile`); the lowest-scoring share goes cheap, and
kept(share) = accuracy of the routed mix / accuracy of always-strong, beside a random router
(its exact expected value), the feature part alone, the exemplar vote alone and the prompt's
length alone. Also: a bootstrap interval, optionally (--sweep) the mix and neighbour count as
policy could set them, and the scorer's time per request (the embedding excluded). Nothing is
fitted to GSM8K. docs/BENCHMARKS.md, "Routing quality", has the results.

    python bench/routing_quality.py [--profile NAME] [--json [PATH]] [--sweep]
                                    [--exemplar-weight W] [--neighbours K] [--exemplars FILE]
                                    [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.config.routing import ProfileName, ScoringConfig
from gateway.routing.features import extract
from gateway.routing.scorer import ComplexityScorer
from gateway.testing.harness.stats import Summary, percentile
from gateway.testing.harness.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO.parent / "shared" / "datasets" / "routing" / "gsm8k_responses.csv"
CHEAP, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
TARGET_KEPT = 0.95
GRID = [round(0.05 * i, 2) for i in range(21)]
# The policy sweep's columns: a field of `summary`, its format and its heading.
SWEEP_COLUMNS = (
    ("exemplar_weight", ".2f", "exemplar_weight"),
    ("neighbours", "d", "neighbours"),
    ("best_share_at_95", ".1%", "best share at 95%"),
    ("kept_at_30", ".1%", "kept at 30%"),
    ("apgr", ".3f", "APGR"),
)


@dataclass(frozen=True)
class Data:
    prompts: list[str]
    cheap: np.ndarray  # bool: the cheap model answered correctly
    strong: np.ndarray  # bool: the strong model answered correctly


def load(path: Path) -> Data:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return Data(
        [r["prompt"] for r in rows],
        np.array([r[CHEAP] == "True" for r in rows]),
        np.array([r[STRONG] == "True" for r in rows]),
    )


# ---------------------------------------------------------------- curves


def kept_curve(scores: np.ndarray, cheap: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """kept[n] for n = 0..N prompts routed cheap, lowest scores first. Within a run of equal
    scores no threshold can choose, so the expected value over their orders is used."""
    order = np.argsort(scores, kind="stable")
    s, c, g = scores[order], cheap[order].astype(float), strong[order].astype(float)
    gain = np.concatenate([[0.0], np.cumsum(c - g)])  # routed-cheap minus always-strong
    # Equal scores: interpolate the gain linearly across each run.
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    bounds = np.concatenate([starts, [len(s)]])
    n = np.arange(len(s) + 1)
    run_gain = np.interp(n, bounds, gain[bounds])
    kept: np.ndarray = (g.sum() + run_gain) / g.sum()
    return kept


def random_curve(n_total: int, cheap: np.ndarray, strong: np.ndarray) -> np.ndarray:
    share = np.arange(n_total + 1) / n_total
    kept: np.ndarray = (share * cheap.mean() + (1 - share) * strong.mean()) / strong.mean()
    return kept


def best_share(kept: np.ndarray, target: float = TARGET_KEPT) -> float:
    ok = np.flatnonzero(kept >= target - 1e-12)
    return float(ok.max()) / (len(kept) - 1)


def at(curve: np.ndarray, share: float) -> float:
    return float(curve[round(share * (len(curve) - 1))])


def threshold(scores: np.ndarray, share: float) -> float:
    """The score at or below which `share` of the prompts fall (-inf for none)."""
    n = round(share * len(scores))
    return float(np.sort(scores)[n - 1]) if n else float("-inf")


def bootstrap(
    scores: np.ndarray, data: Data, rounds: int, seed: int = 0
) -> dict[str, tuple[float, float]]:
    rng = np.random.default_rng(seed)
    n = len(scores)
    kept30, best, wins = [], [], []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        curve = kept_curve(scores[idx], data.cheap[idx], data.strong[idx])
        rand = random_curve(n, data.cheap[idx], data.strong[idx])
        kept30.append(at(curve, 0.30))
        best.append(best_share(curve))
        wins.append(float(np.mean(curve[1:-1] >= rand[1:-1])))

    return {
        "kept_at_30": interval(kept30),
        "best_share_95": interval(best),
        "share_of_points_above_random": interval(wins),
    }


def interval(values: list[float]) -> tuple[float, float]:
    """The central 95 % of `values`."""
    return percentile(values, 2.5), percentile(values, 97.5)


# ---------------------------------------------------------------- scoring and latency


def body(prompt: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}]}


def score_all(scorer: ComplexityScorer, prompts: list[str], vectors: np.ndarray) -> np.ndarray:
    return np.array(
        [scorer.score(extract(body(p)), v).value for p, v in zip(prompts, vectors, strict=True)]
    )


def latency(
    scorer: ComplexityScorer, bodies: list[dict[str, Any]], vectors: list[np.ndarray], rounds: int
) -> dict[str, dict[str, float]]:
    """Per request, µs: wall time of extract, of score, and of both; thread CPU time of both."""
    samples: dict[str, list[float]] = {"extract": [], "score": [], "total": [], "total_cpu": []}
    for round_ in range(rounds + 1):
        for b, v in zip(bodies, vectors, strict=True):
            cpu0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            features = extract(b)
            t1 = time.perf_counter_ns()
            scorer.score(features, v)
            t2, cpu1 = time.perf_counter_ns(), time.thread_time_ns()
            if round_:  # the first round warms caches up
                samples["extract"].append((t1 - t0) / 1e3)
                samples["score"].append((t2 - t1) / 1e3)
                samples["total"].append((t2 - t0) / 1e3)
                samples["total_cpu"].append((cpu1 - cpu0) / 1e3)
    summaries = {k: Summary.of(x) for k, x in samples.items()}
    return {k: {"p50": s.p50, "p99": s.p99, "max": s.max} for k, s in summaries.items()}


def stress_bodies() -> list[dict[str, Any]]:
    """Requests far larger than GSM8K's, to bound the cost: a 20 kB code paste, a 40-turn
    conversation with tools, a long Chinese text, a 100 kB log."""
    code = "def handler(event, context):\n    return process(event['body'])  # TODO\n" * 300
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "Earlier turn text. " * 30}
        for i in range(40)
    ]
    return [
        body(f"Find the bug and explain step by step:\n```python\n{code}```"),
        {
            "messages": [*turns, {"role": "user", "content": "Now compare them."}],
            "tools": [{"type": "function"}] * 8,
        },
        body("请详细分析以下内容，并比较各种方案的优缺点，给出推导过程。" * 200),  # noqa: RUF001
        body("2026-11-30 12:00:01 ERROR worker_3 failed: ConnectionResetError()\n" * 1600),
    ]


# ---------------------------------------------------------------- report


def scorer_configs(args: argparse.Namespace) -> dict[str, ScoringConfig]:
    common = {"profile": args.profile, "exemplars": args.exemplars, "neighbours": args.neighbours}
    return {
        "router": ScoringConfig(**common, exemplar_weight=args.exemplar_weight),
        "features only": ScoringConfig(**common, exemplar_weight=0),
        "exemplars only": ScoringConfig(**common, exemplar_weight=1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = load(args.dataset)
    embedder = new_embedder(EmbedderConfig())
    await embedder.start()
    try:
        started = time.perf_counter()
        vectors = await embedder.embed_many(data.prompts)
        embed_seconds = time.perf_counter() - started
        scorers = {name: ComplexityScorer(c) for name, c in scorer_configs(args).items()}
        sweep = [ComplexityScorer(c) for c in sweep_configs(args)] if args.sweep else []
        for scorer in [*scorers.values(), *sweep]:
            await scorer.prepare(embedder)
    finally:
        await embedder.close()

    scores = {name: score_all(s, data.prompts, vectors) for name, s in scorers.items()}
    scores["length only"] = np.array(
        [float(extract(body(p)).last_user_tokens) for p in data.prompts]
    )
    curves = {name: kept_curve(s, data.cheap, data.strong) for name, s in scores.items()}
    n = len(data.prompts)
    rand = random_curve(n, data.cheap, data.strong)
    router = curves["router"]
    gap = router[1:n] - rand[1:n]  # at every share strictly between 0 and 1
    stress = stress_bodies()
    return {
        "dataset": str(args.dataset),
        "prompts": n,
        "cheap_accuracy": float(data.cheap.mean()),
        "strong_accuracy": float(data.strong.mean()),
        "config": {
            "profile": args.profile,
            "exemplar_weight": scorers["router"].exemplar_weight,
            "neighbours": scorers["router"].neighbours,
            "exemplars": args.exemplars or "shipped",
            "exemplar_count": len(scorers["router"].exemplars),
        },
        "embedding_seconds": embed_seconds,
        "curve": [
            {"share": s, "threshold": threshold(scores["router"], s), "random": at(rand, s)}
            | {name: at(c, s) for name, c in curves.items()}
            for s in GRID
        ],
        "best_share_at_95": {name: best_share(c) for name, c in curves.items()}
        | {"random": best_share(rand)},
        "beats_random": {
            "every_5pct_point": bool(all(at(router, s) > at(rand, s) for s in GRID[1:-1])),
            "share_of_all_points": float(np.mean(gap > 0)),
            "worst_gap": float(gap.min()),
            "worst_gap_at_share": float(np.argmin(gap) + 1) / n,
        },
        "apgr": {name: apgr(c, data) for name, c in curves.items()} | {"random": apgr(rand, data)},
        "bootstrap_95ci": bootstrap(scores["router"], data, args.bootstrap),
        "sweep": [summary(s, data, vectors) for s in sweep],
        "latency_us": latency(
            scorers["router"], [body(p) for p in data.prompts], list(vectors), args.rounds
        ),
        "latency_us_large_requests": latency(
            scorers["router"], stress, [vectors[0]] * len(stress), 200
        ),
    }


def sweep_configs(args: argparse.Namespace) -> list[ScoringConfig]:
    return [
        ScoringConfig(
            profile=args.profile, exemplars=args.exemplars, exemplar_weight=w, neighbours=k
        )
        for w in (0.0, 0.25, 0.5, 0.75, 1.0)
        for k in ((args.neighbours,) if w == 0 else (3, 7, 15))
    ]


def summary(scorer: ComplexityScorer, data: Data, vectors: np.ndarray) -> dict[str, float]:
    curve = kept_curve(score_all(scorer, data.prompts, vectors), data.cheap, data.strong)
    return {
        "exemplar_weight": scorer.exemplar_weight,
        "neighbours": scorer.neighbours,
        "best_share_at_95": best_share(curve),
        "kept_at_30": at(curve, 0.30),
        "apgr": apgr(curve, data),
    }


def apgr(curve: np.ndarray, data: Data) -> float:
    """Average performance gap recovered (RouteLLM's summary): 0.5 for a random router."""
    accuracy = curve * data.strong.mean()
    pgr = (accuracy - data.cheap.mean()) / (data.strong.mean() - data.cheap.mean())
    return float(np.trapezoid(pgr, dx=1 / (len(curve) - 1)))


def print_report(r: dict[str, Any]) -> None:
    cheap, strong = r["cheap_accuracy"], r["strong_accuracy"]
    c = r["config"]
    print(
        f"profile {c['profile']}: {r['prompts']} GSM8K prompts; cheap (Mixtral) accuracy "
        f"{cheap:.3f}, strong (GPT-4) {strong:.3f}; all cheap keeps {cheap / strong:.1%}"
    )
    print(
        f"scorer: the weights of profile {c['profile']}, {c['exemplar_count']} exemplars "
        f"({c['exemplars']}), k={c['neighbours']}, exemplar_weight={c['exemplar_weight']}\n"
    )
    names = ["router", "random", "features only", "exemplars only", "length only"]
    rows = [
        (f"{p['share']:.0%}", f"{p['threshold']:.3f}", *(f"{p[name]:.1%}" for name in names))
        for p in r["curve"]
    ]
    print(markdown_table(["cheap share", "threshold", *(f"kept: {n}" for n in names)], rows))
    best = r["best_share_at_95"]
    print(
        "\nbest cheap share at kept >= 95%: " + ", ".join(f"{k} {v:.1%}" for k, v in best.items())
    )
    print("APGR (random = 0.5): " + ", ".join(f"{k} {v:.3f}" for k, v in r["apgr"].items()))
    b = r["beats_random"]
    print(
        f"router above random: at every 5% point: {b['every_5pct_point']}; at "
        f"{b['share_of_all_points']:.1%} of all {r['prompts'] - 1} shares; worst gap "
        f"{b['worst_gap']:+.2%} at {b['worst_gap_at_share']:.1%} cheap"
    )
    ci = "; ".join(f"{k} {lo:.3f}..{hi:.3f}" for k, (lo, hi) in r["bootstrap_95ci"].items())
    print(f"bootstrap 95% intervals (router): {ci}")
    if r["sweep"]:
        rows = [[format(s[key], spec) for key, spec, _ in SWEEP_COLUMNS] for s in r["sweep"]]
        header = [heading for _, _, heading in SWEEP_COLUMNS]
        print("\npolicy sweep\n\n" + markdown_table(header, rows))
    print(f"\nembedding all prompts (not the router's cost): {r['embedding_seconds']:.1f} s")
    for title, key in (("GSM8K", "latency_us"), ("large requests", "latency_us_large_requests")):
        rows = [
            (part, *(f"{v[k]:.1f}" for k in ("p50", "p99", "max"))) for part, v in r[key].items()
        ]
        print(f"\nrouter time per request, {title} (µs, excluding the embedding)\n")
        print(markdown_table(["", "p50", "p99", "max"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--exemplars", help="exemplar file (default: the shipped set)")
    ap.add_argument(
        "--profile",
        choices=get_args(ProfileName),
        default="general",
        help="scoring profile (default: general)",
    )
    ap.add_argument("--exemplar-weight", type=float, help="default: the profile's")
    ap.add_argument("--neighbours", type=int, help="default: the profile's")
    ap.add_argument("--rounds", type=int, default=5, help="latency passes over the prompts")
    ap.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples")
    ap.add_argument("--sweep", action="store_true", help="also sweep the mix and neighbours")
    ap.add_argument(
        "--json", nargs="?", const="-", metavar="PATH", help="results as JSON (stdout: no PATH)"
    )
    args = ap.parse_args(argv)
    report = asyncio.run(run(args))
    if args.json == "-":
        print(json.dumps(report, indent=2))
        return 0
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print_report(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
