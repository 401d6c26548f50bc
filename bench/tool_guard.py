"""Tool-call validation benchmark on BFCL v4 (gateway.guard.tools).

`--section validate`: every ground-truth call of the BFCL dev sets (bench/bfcl.py converts them
to OpenAI `tools` and `tool_calls`) must pass (target: 0 false rejects), each mutation kind of
them must be caught (target 100 %), cleanable variants must be restored, and a warm check must
take under 1 ms at p99. `--section repair` (bench/tool_guard_repair.py): the guard in the
request flow, over HTTP, a fake upstream scripted with BFCL calls behind gateways with the
guard on and off. `--section undeclared` (bench/tool_guard_undeclared.py): schemas converted
without `additionalProperties: false`, the ground truth and calls with parameters the tool does
not declare, under each `undeclared_parameters` policy. docs/BENCHMARKS.md, "Tool-call
validation", says how and has the results.

    python bench/tool_guard.py [--section validate|repair|undeclared|all] [--json] [--sets ...]
        validate: [--repeat N]
        repair:   [--samples 300] [--concurrency 8] [--rounds 5] [--baseline-repeat 3]
                  [--max-seconds 300]
"""

from __future__ import annotations

import gc
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bfcl import BFCL, EXPECTED_KIND, SEED, SETS, Sample, dataset_issue, load, mutations
from tool_guard_repair import RepairOptions, passed, report_repair, run_repair
from tool_guard_undeclared import report_undeclared, run_undeclared

from gateway.guard.schemas import ValidatorCache, compile_schema
from gateway.guard.tools import ToolCatalog
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.stats import Summary
from gateway.testing.harness.tables import markdown_table

SUGGESTION = re.compile(r"did you mean '([^']+)'\?")


@dataclass(frozen=True)
class Options:
    section: str = option(
        "validate",
        "validate: in-process validation; repair: through the gateway over HTTP; undeclared: "
        "parameters the schema does not declare, per policy, in process",
        choices=("validate", "repair", "undeclared", "all"),
    )
    json: bool = option(False, "print the results as JSON")
    sets: str = option(",".join(SETS), "BFCL sets, comma-separated")
    repeat: int = option(5, "validate: warm passes over all calls")
    samples: int = option(300, "repair: BFCL samples")
    concurrency: int = option(8, "repair: requests in flight")
    rounds: int = option(5, "repair: rounds of every phase")
    baseline_repeat: int = option(3, "repair: passes of the valid requests per round, per gateway")
    max_seconds: float = option(300.0, "repair: no new round once this is spent (one always runs)")


# ---------------------------------------------------------------- measurement


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """fn's result and how long it took, in seconds."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def latency(seconds: list[float]) -> dict[str, float]:
    s = Summary.of([x * 1000 for x in seconds])
    return {"n": s.count, "p50_ms": s.p50, "p99_ms": s.p99, "max_ms": s.max}


def measure_cold(samples: list[Sample]) -> dict[str, dict[str, float]]:
    """Every schema compiled: a fresh cache per request, then the first check."""
    per_request, first_check, per_schema = [], [], []
    for sample in samples:
        cache = ValidatorCache()
        catalog, elapsed = timed(ToolCatalog.from_request, sample.tools, {}, True, cache=cache)
        per_request.append(elapsed)
        first_check.append(timed(catalog.check, sample.calls[0])[1])
        for tool in sample.tools:
            per_schema.append(timed(compile_schema, tool["function"]["parameters"])[1])
    return {
        "catalog_per_request_cold": latency(per_request),
        "first_check_after_compile": latency(first_check),
        "compile_per_schema": latency(per_schema),
    }


def measure_warm(
    samples: list[Sample], cache: ValidatorCache, repeat: int
) -> dict[str, dict[str, float]]:
    """Every schema already in the cache: the per-request catalog and each call's check."""
    per_request, per_call = [], []
    gc.collect()
    for _ in range(repeat):
        for sample in samples:
            catalog, elapsed = timed(ToolCatalog.from_request, sample.tools, {}, True, cache=cache)
            per_request.append(elapsed)
            for call in sample.calls:
                per_call.append(timed(catalog.check, call)[1])
    return {"check_valid_warm": latency(per_call), "catalog_per_request_warm": latency(per_request)}


@dataclass
class Outcomes:
    per_set: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    rejects: list[dict[str, Any]] = field(default_factory=list)
    dataset_issues: list[dict[str, Any]] = field(default_factory=list)
    caught: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    restored: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    missed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    changed_by_cleaning: int = 0
    rejected_without_cleaning: int = 0
    invalid_check: list[float] = field(default_factory=list)


def judge(samples: list[Sample], cache: ValidatorCache) -> Outcomes:
    """Ground truth must pass; its mutations must be caught, its cleanable variants restored."""
    out = Outcomes()
    pool = sorted({t["function"]["name"] for s in samples for t in s.tools})
    rng = random.Random(SEED)
    for sample in samples:
        catalog = ToolCatalog.from_request(sample.tools, {}, True, cache=cache)
        strict = ToolCatalog.from_request(sample.tools, {}, False, cache=cache)
        counts = out.per_set[sample.set_name]
        for call in sample.calls:
            checked = catalog.check(call)
            counts["calls"] += 1
            out.changed_by_cleaning += bool(checked.changes)
            out.rejected_without_cleaning += not strict.check(call).ok
            if not checked.ok:  # a false reject, unless the dataset contradicts itself
                arguments = json.loads(call["function"]["arguments"])
                entry = {
                    "id": sample.id,
                    "call": call["function"],
                    "problems": [p.message for p in checked.problems],
                    "dataset_issue": dataset_issue(sample, call["function"]["name"], arguments),
                }
                if entry["dataset_issue"]:
                    out.dataset_issues.append(entry)
                    counts["dataset_issues"] += 1
                else:
                    out.rejects.append(entry)
                    counts["rejects"] += 1
                continue
            for kind, mutated in mutations(sample, call, pool, rng):
                _judge_mutation(out, catalog, call, kind, mutated, sample.id)
    return out


def _judge_mutation(
    out: Outcomes,
    catalog: ToolCatalog,
    call: dict[str, Any],
    kind: str,
    mutated: dict[str, Any],
    sample_id: str,
) -> None:
    result, elapsed = timed(catalog.check, mutated)
    if kind in EXPECTED_KIND:
        out.invalid_check.append(elapsed)
        hit = not result.ok and any(p.kind == EXPECTED_KIND[kind] for p in result.problems)
        counts = out.caught[kind]
    else:  # must be accepted, with the ground truth's value restored
        sent = json.loads(result.call["function"]["arguments"])
        hit = result.ok and sent == json.loads(call["function"]["arguments"])
        counts = out.restored[kind]
    counts["total"] += 1
    counts["caught" if hit else "missed"] += 1
    if kind.endswith(" name") and hit:
        suggested = SUGGESTION.search(result.problems[0].message)
        counts["suggested"] += suggested is not None
        counts["suggested the called tool"] += bool(
            suggested and suggested.group(1) == call["function"]["name"]
        )
    if not hit:
        out.missed[kind].append(f"{sample_id}: {mutated['function']} -> {result.problems}")


def run(set_names: list[str], repeat: int) -> dict[str, Any]:
    samples = [s for name in set_names for s in load(name)]
    cache = ValidatorCache(max_entries=100_000)
    cold = measure_cold(samples)
    out = judge(samples, cache)
    warm = measure_warm(samples, cache, repeat)
    return {
        "sets": {name: dict(out.per_set[name]) for name in set_names},
        "samples": len(samples),
        "tools": sum(len(s.tools) for s in samples),
        "distinct_schemas": len(cache),
        "calls": sum(c["calls"] for c in out.per_set.values()),
        "false_rejects": len(out.rejects),
        "false_reject_list": out.rejects,
        "dataset_issues": len(out.dataset_issues),
        "dataset_issue_list": out.dataset_issues,
        "changed_by_cleaning": out.changed_by_cleaning,
        "rejected_without_cleaning": out.rejected_without_cleaning,
        "mutations": {
            kind: {**c, "rate": c["caught"] / c["total"]} for kind, c in out.caught.items()
        },
        "cleaned_variants": {
            kind: {"total": c["total"], "restored": c["caught"], "rate": c["caught"] / c["total"]}
            for kind, c in out.restored.items()
        },
        "missed": {k: v[:10] for k, v in out.missed.items()},
        "latency": {
            **warm,
            "check_invalid_warm": latency(out.invalid_check),
            **cold,
        },
        "repeat": repeat,
    }


# ---------------------------------------------------------------- report


def report(result: dict[str, Any]) -> str:
    sets = [
        (name, c.get("calls", 0), c.get("rejects", 0), c.get("dataset_issues", 0))
        for name, c in result["sets"].items()
    ]
    sets.append(("all", result["calls"], result["false_rejects"], result["dataset_issues"]))
    lines = [
        f"BFCL v4: {result['samples']} samples, {result['tools']} tools "
        f"({result['distinct_schemas']} distinct schemas), {result['calls']} ground-truth calls",
        "",
        markdown_table(["set", "calls", "false rejects", "dataset issues"], sets),
        "",
        f"ground-truth calls changed by cleaning: {result['changed_by_cleaning']}; "
        f"rejected with cleaning off: {result['rejected_without_cleaning']}",
        *(f"  FALSE REJECT {e['id']}: {e['problems']}" for e in result["false_reject_list"]),
        *(
            f"  dataset issue {e['id']}: {e['dataset_issue']}: {e['problems']}"
            for e in result["dataset_issue_list"]
        ),
        "",
    ]
    mutations = result["mutations"].items()
    rows = [(kind, c["total"], c.get("caught", 0), f"{c['rate']:.1%}") for kind, c in mutations]
    lines.append(markdown_table(["mutation", "total", "caught", "rate"], rows))
    lines += [
        f"  {kind}: a 'did you mean' in {c['suggested']} of {c['total']}, "
        f"naming the ground-truth tool in {c['suggested the called tool']}"
        for kind, c in mutations
        if "suggested" in c
    ]
    lines += [f"  MISSED {k}: {e}" for k, examples in result["missed"].items() for e in examples]
    cleaned = result["cleaned_variants"].items()
    rows = [(kind, c["total"], c["restored"], f"{c['rate']:.1%}") for kind, c in cleaned]
    lines += ["", markdown_table(["cleaned, must pass", "total", "restored", "rate"], rows), ""]
    rows = [
        (what, s["n"], *(f"{s[k]:.3f}" for k in ("p50_ms", "p99_ms", "max_ms")))
        for what, s in result["latency"].items()
    ]
    lines.append(markdown_table(["latency (ms)", "n", "p50", "p99", "max"], rows))
    p99 = max(result["latency"][k]["p99_ms"] for k in ("check_valid_warm", "check_invalid_warm"))
    caught_all = all(c["rate"] == 1 for c in result["mutations"].values())
    lines += [
        "",
        f"targets: false rejects 0: {passed(result['false_rejects'] == 0)}; "
        f"mutations 100 % caught: {passed(caught_all)}; "
        f"warm p99 < 1 ms per call: {passed(p99 < 1)} ({p99:.3f} ms)",
    ]
    return "\n".join(lines)


def main() -> int:
    opts = parse_options(Options, description=__doc__)
    if not (BFCL / "possible_answer").is_dir():
        print(f"BFCL data not found at {BFCL} (see ../shared/datasets/README.md)", file=sys.stderr)
        return 2
    sets = opts.sets.split(",")
    results: dict[str, Any] = {}
    if opts.section in ("validate", "all"):
        results["validate"] = run(sets, opts.repeat)
    if opts.section in ("repair", "all"):
        repair = RepairOptions(
            opts.samples, opts.concurrency, opts.rounds, opts.baseline_repeat, opts.max_seconds
        )
        results["repair"] = run_repair(sets, repair)
    if opts.section in ("undeclared", "all"):
        results["undeclared"] = run_undeclared(sets)
    if opts.json:
        out = results if opts.section == "all" else results[opts.section]
        print(json.dumps(out, indent=2, default=str))
    else:
        reports = {"validate": report, "repair": report_repair, "undeclared": report_undeclared}
        print("\n\n".join(reports[name](result) for name, result in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
