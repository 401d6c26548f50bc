"""The undeclared-parameter section of bench/tool_guard.py (`--section undeclared`): BFCL's tools
converted *open* (no `additionalProperties: false`, as most clients write their schemas), the
ground truth judged under each `guard.tools.undeclared_parameters` policy (false rejects must
stay 0), and calls mutated with parameters the tool does not declare (bfcl.undeclared_mutations)
settled as the gateway settles them (guard/repair.py, in process) with two scripted models: one
that sends the ground truth when told what is wrong, one that repeats its call. docs/BENCHMARKS.md
("Undeclared parameters") has the results.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter, defaultdict
from typing import Any

from bfcl import SEED, Sample, dataset_issue, load, undeclared_mutations

from gateway.config.guard import ToolGuardConfig, UndeclaredPolicy
from gateway.guard.repair import Settled, settle
from gateway.guard.schemas import ValidatorCache
from gateway.guard.tools import ToolCatalog
from gateway.guard.undeclared import review_parameters
from gateway.testing.harness.tables import markdown_table

POLICIES: tuple[UndeclaredPolicy, ...] = ("repair", "strip", "allow")
Json = dict[str, Any]


def message(*calls: Json) -> Json:
    return {"role": "assistant", "content": None, "tool_calls": [dict(c) for c in calls]}


def arguments_of(settled: Settled) -> list[Any]:
    return [json.loads(c["function"]["arguments"]) for c in settled.message.get("tool_calls", [])]


def leaked(settled: Settled, schemas: dict[str, Any]) -> bool:
    """Whether the client got a parameter the tool's schema does not declare."""
    for call in settled.message.get("tool_calls", []):
        schema = schemas.get(call["function"]["name"])
        arguments = json.loads(call["function"]["arguments"])
        if review_parameters(arguments, schema, "repair", rename=False).undeclared:
            return True
    return False


class Bench:
    def __init__(self, samples: list[Sample]) -> None:
        self.samples = samples
        self.cache = ValidatorCache(max_entries=100_000)
        rng = random.Random(SEED)
        # The same mutations for every policy: (sample, ground-truth call, kind, mutated call).
        self.cases = [
            (sample, call, kind, mutated)
            for sample in samples
            for call in sample.calls
            for kind, mutated in undeclared_mutations(sample, call, rng)
        ]

    def catalog(self, sample: Sample, policy: UndeclaredPolicy) -> ToolCatalog:
        return ToolCatalog.from_request(sample.tools, {}, True, undeclared=policy, cache=self.cache)

    def ground_truth(self, policy: UndeclaredPolicy) -> dict[str, Any]:
        calls = rejects = issues = 0
        listed: list[str] = []
        for sample in self.samples:
            catalog = self.catalog(sample, policy)
            for call in sample.calls:
                calls += 1
                checked = catalog.check(call)
                if checked.ok:
                    continue
                arguments = json.loads(call["function"]["arguments"])
                if dataset_issue(sample, call["function"]["name"], arguments):
                    issues += 1
                else:
                    rejects += 1
                    listed.append(f"{sample.id}: {[str(p) for p in checked.problems]}")
        return {"calls": calls, "false_rejects": rejects, "dataset_issues": issues, "list": listed}

    async def mutations(self, policy: UndeclaredPolicy) -> dict[str, Counter[str]]:
        config = ToolGuardConfig(undeclared_parameters=policy)
        rows: dict[str, Counter[str]] = defaultdict(Counter)
        for sample, call, kind, mutated in self.cases:
            if not self.catalog(sample, policy).check(call).ok:
                continue  # the dataset's own contradictions (above) are not mutated
            truth = json.loads(call["function"]["arguments"])
            schemas = {t["function"]["name"]: t["function"]["parameters"] for t in sample.tools}
            row = rows[kind]
            row["calls"] += 1
            for model, answer in (("corrects", message(call)), ("repeats", message(mutated))):
                asked = 0

                async def ask_again(extra: list[Json], answer: Json = answer) -> Json:
                    nonlocal asked
                    asked += 1
                    return answer

                catalog = self.catalog(sample, policy)
                settled = await settle(message(mutated), catalog, None, config, ask_again)
                got = arguments_of(settled)
                row[f"{model}: ground truth"] += got == [truth]
                row[f"{model}: other valid call"] += bool(got) and got != [truth]
                row[f"{model}: no call"] += not got
                row[f"{model}: undeclared reached the client"] += leaked(settled, schemas)
                row[f"{model}: repairs"] += asked
                row[f"{model}: {settled.outcome}"] += 1
        return rows


def run_undeclared(set_names: list[str]) -> dict[str, Any]:
    samples = [s for name in set_names for s in load(name, closed=False)]
    bench = Bench(samples)
    out: dict[str, Any] = {"samples": len(samples), "mutated_calls": len(bench.cases)}
    for policy in POLICIES:
        rows = asyncio.run(bench.mutations(policy))
        out[policy] = {
            "ground_truth": bench.ground_truth(policy),
            "mutations": {kind: dict(row) for kind, row in rows.items()},
        }
    return out


def _share(row: dict[str, int], key: str) -> str:
    return f"{row.get(key, 0) / row['calls']:.1%}"


def report_undeclared(result: dict[str, Any]) -> str:
    lines = [
        f"Undeclared parameters: {result['samples']} BFCL samples, schemas converted open "
        f"(no additionalProperties: false); {result['mutated_calls']} mutated calls",
        "",
    ]
    truth = [
        (p, g["calls"], g["false_rejects"], g["dataset_issues"])
        for p in POLICIES
        for g in [result[p]["ground_truth"]]
    ]
    lines += [markdown_table(["policy", "ground truth", "false rejects", "dataset"], truth), ""]
    lines += [
        f"  FALSE REJECT ({p}): {e}" for p in POLICIES for e in result[p]["ground_truth"]["list"]
    ]
    header = ["policy", "mutation", "calls"]
    for model in ("corrects", "repeats"):
        header += [f"{model}: ground truth", "other call", "no call", "undeclared sent", "repairs"]
    rows = []
    for policy in POLICIES:
        for kind, row in result[policy]["mutations"].items():
            cells: list[Any] = [policy, kind, row["calls"]]
            for model in ("corrects", "repeats"):
                cells += [
                    _share(row, f"{model}: ground truth"),
                    _share(row, f"{model}: other valid call"),
                    _share(row, f"{model}: no call"),
                    _share(row, f"{model}: undeclared reached the client"),
                    f"{row.get(f'{model}: repairs', 0) / row['calls']:.2f}",
                ]
            rows.append(cells)
    lines.append(markdown_table(header, rows))
    return "\n".join(lines)
