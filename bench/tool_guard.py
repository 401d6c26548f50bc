"""Tool-call validation benchmark on BFCL v4 (gateway.guard.tools).

Every ground-truth call of the BFCL dev sets, converted to OpenAI `tools` and `tool_calls`, must
pass validation (false rejects: target 0); mutations of those calls must be caught (misspelled
or invented function name, missing required parameter, unexpected parameter, wrong type, value
outside an enum: target 100 % each); and validation must be fast (target p99 < 1 ms per call
with a warm validator cache; cold compiles are reported separately).

Conversion of BFCL's schema dialect: `dict` -> object, `float` -> number, `tuple` -> array,
`any` -> no type; BFCL's `optional` annotation is dropped (`required` says the same); dots in
function names become underscores; objects with a fixed `properties` list get
`additionalProperties: false` (BFCL functions take exactly the parameters they list; open dicts
without `properties`, such as `gradeDict`, stay open). A ground-truth call takes the first
allowed value of each parameter, and leaves out parameters whose first allowed value is ""
(BFCL's "may be omitted"); nested dicts are resolved the same way, recursively.

`--section repair` measures the guard in the request flow, over HTTP: a fake upstream and two
gateways in front of it (tool guard on with its defaults, repair_attempts 2 and on_failure strip;
and tool guard off; access log and cache off in both) run as subprocesses. BFCL samples (300,
spread evenly over the sets, ground truth valid as is) are sent as chat requests with their
converted `tools`, the upstream scripted with the fake's `replies` (one per assistant turn):
(a) `[good]`; (b) `[mutated, good]` for each mutation kind, a model that corrects on feedback;
(c) `[mutated, mutated, mutated]`, one that never does; and `[cleanable variant]`. The client
must receive exactly the good calls in (a) and (b), the good calls minus the bad one in (c)
(stripped: never an undeclared tool or arguments that break the schema), the cleaned ground
truth for the variants; upstream calls per request are counted from the fake's request log.
Latency: p50/p99 at concurrency 8 (and 1), medians over rounds, (a) with the guard on vs off,
(b) vs (a) for one repair round; and the gateway process's CPU time per request.

    python bench/tool_guard.py [--section validate|repair|all] [--json] [--sets a,b,...]
        validate: [--repeat N]
        repair:   [--samples 300] [--concurrency 8] [--rounds 5] [--baseline-repeat 3]
                  [--max-seconds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BFCL = REPO.parent / "shared" / "datasets" / "tools" / "bfcl"
SETS = ["simple_python", "multiple", "parallel", "parallel_multiple", "live_simple"]
TYPES = {"dict": "object", "float": "number", "tuple": "array"}
WRONG_TYPE_VALUES: dict[str, Any] = {
    "string": 42,
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not an array",
    "object": "not an object",
}
EXTRA_PARAMETER = "unexpected_parameter"
SUGGESTION = re.compile(r"did you mean '([^']+)'\?")
SEED = 20240601

sys.path.insert(0, str(REPO))  # run as a script from anywhere

import aiohttp  # noqa: E402
import uvloop  # noqa: E402
from procs import (  # noqa: E402
    JSON_HEADERS,
    Server,
    cpu_seconds,
    fmt,
    load_average,
    percentile,
    pythonpath,
)

from gateway.guard.schemas import ValidatorCache, compile_schema  # noqa: E402
from gateway.guard.tools import CheckedCall, ToolCatalog  # noqa: E402

# ---------------------------------------------------------------- data and conversion


@dataclass
class Sample:
    set_name: str
    id: str
    tools: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    functions: dict[str, dict[str, Any]]  # by OpenAI name: the BFCL function as shipped
    messages: list[dict[str, Any]] = field(default_factory=list)  # the question's first turn


def convert_schema(schema: Any) -> Any:
    """A BFCL parameter schema in JSON Schema (see the module docstring)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "optional":
            continue
        if key == "type":
            if value != "any":
                out["type"] = TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: convert_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = convert_schema(value)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    if out.get("type") == "array" and "enum" in out:
        # BFCL puts the allowed values of an array's items on the array itself.
        out["items"] = {**out.get("items", {}), "enum": out.pop("enum")}
    return out


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def convert_tool(function: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": openai_name(function["name"]),
            "description": function.get("description", ""),
            "parameters": convert_schema(function["parameters"]),
        },
    }


def first_allowed(allowed: list[Any]) -> tuple[bool, Any]:
    """(present?, value) for a BFCL list of allowed values."""
    if not allowed or allowed[0] == "":
        return False, None
    return True, resolve(allowed[0])


def resolve(value: Any) -> Any:
    """A ground-truth value: nested dicts hold lists of allowed values, recursively."""
    if isinstance(value, dict):
        out = {}
        for key, allowed in value.items():
            present, chosen = (
                first_allowed(allowed) if isinstance(allowed, list) else (True, allowed)
            )
            if present:
                out[key] = chosen
        return out
    if isinstance(value, list):
        return [resolve(item) if isinstance(item, dict | list) else item for item in value]
    return value


def load(set_name: str) -> list[Sample]:
    questions = BFCL / f"BFCL_v4_{set_name}.json"
    answers = BFCL / "possible_answer" / f"BFCL_v4_{set_name}.json"
    truth = {}
    for line in answers.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            truth[row["id"]] = row["ground_truth"]
    samples = []
    for line in questions.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        functions = {openai_name(f["name"]): f for f in row["function"]}
        tools = [convert_tool(f) for f in row["function"]]
        sample = Sample(set_name, row["id"], tools, [], functions, row["question"][0])
        for index, answer in enumerate(truth[row["id"]]):
            [(name, params)] = answer.items()
            arguments = {}
            for param, allowed in params.items():
                present, value = first_allowed(allowed)
                if present:
                    arguments[param] = value
            sample.calls.append(tool_call(openai_name(name), arguments, f"call_{index}"))
        samples.append(sample)
    return samples


def tool_call(name: str, arguments: Any, call_id: str = "call_0") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


# ---------------------------------------------------------------- mutations


def parameters_of(sample: Sample, name: str) -> dict[str, Any]:
    for tool in sample.tools:
        if tool["function"]["name"] == name:
            return tool["function"]["parameters"]  # type: ignore[no-any-return]
    return {}


def misspell(name: str, taken: set[str], rng: random.Random) -> str:
    """Two neighbouring letters swapped, or one dropped: a near miss no tool is called."""
    positions = list(range(len(name) - 1))
    rng.shuffle(positions)
    for i in positions:
        for candidate in (
            name[:i] + name[i + 1] + name[i] + name[i + 2 :],
            name[:i] + name[i + 1 :],
        ):
            if candidate != name and candidate not in taken:
                return candidate
    return name + "x"


def mutations(
    sample: Sample, call: dict[str, Any], pool: list[str], rng: random.Random
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, mutated call) for each mutation that applies to `call`."""
    name = call["function"]["name"]
    arguments = json.loads(call["function"]["arguments"])
    schema = parameters_of(sample, name)
    properties = schema.get("properties", {})
    taken = {tool["function"]["name"] for tool in sample.tools}

    yield "misspelled name", tool_call(misspell(name, taken, rng), arguments)
    invented = rng.choice([n for n in pool if n not in taken])
    yield "invented name", tool_call(invented, arguments)
    for param in schema.get("required", []):
        if param in arguments:
            yield "missing required", tool_call(name, _without(arguments, param))
    yield "unexpected parameter", tool_call(name, {**arguments, EXTRA_PARAMETER: "x"})
    for param, value in arguments.items():
        wanted = properties.get(param, {}).get("type")
        if wanted in WRONG_TYPE_VALUES:
            yield "wrong type", tool_call(name, {**arguments, param: WRONG_TYPE_VALUES[wanted]})
        # Not mutations to catch: cleaning must turn these back into the ground truth.
        if wanted in ("integer", "number") and not isinstance(value, bool):
            yield "number as string", tool_call(name, {**arguments, param: str(value)})
        if wanted == "boolean" and isinstance(value, bool):
            yield "boolean as string", tool_call(name, {**arguments, param: str(value).lower()})
        if properties.get(param, {}).get("format") == "date" and isinstance(value, str):
            human = _human_date(value)
            if human:
                yield "human date", tool_call(name, {**arguments, param: human})
        enum = properties.get(param, {}).get("enum")
        if enum:
            yield "outside enum", tool_call(name, {**arguments, param: _outside(enum)})
        items_enum = properties.get(param, {}).get("items", {}).get("enum")
        if items_enum and isinstance(value, list) and value:
            mutated = [_outside(items_enum), *value[1:]]
            yield "outside enum", tool_call(name, {**arguments, param: mutated})


def _human_date(iso: str) -> str | None:
    try:
        day = date.fromisoformat(iso)
    except ValueError:
        return None
    return f"{day:%B} {day.day}, {day.year}"


def _without(arguments: dict[str, Any], param: str) -> dict[str, Any]:
    return {k: v for k, v in arguments.items() if k != param}


def _outside(enum: list[Any]) -> Any:
    if all(isinstance(v, str) for v in enum):
        candidate = f"{enum[0]}_other"
        while candidate in enum:
            candidate += "_"
        return candidate
    numbers = [v for v in enum if isinstance(v, int | float) and not isinstance(v, bool)]
    return (max(numbers) + 1) if numbers else "not_in_enum"


EXPECTED_KIND = {
    "misspelled name": "unknown_tool",
    "invented name": "unknown_tool",
    "missing required": "schema",
    "unexpected parameter": "schema",
    "wrong type": "schema",
    "outside enum": "schema",
}


# ---------------------------------------------------------------- measurement


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """fn's result and how long it took, in seconds."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def latency(seconds: list[float]) -> dict[str, float]:
    return {
        "n": len(seconds),
        "p50_ms": percentile(seconds, 50),
        "p99_ms": percentile(seconds, 99),
        "max_ms": max(seconds) * 1000 if seconds else math.nan,
    }


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
            if not checked.ok:
                entry = _reject(sample, call, checked)
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


def _reject(sample: Sample, call: dict[str, Any], checked: CheckedCall) -> dict[str, Any]:
    """A ground-truth call the validator rejected, and whether the dataset itself is at fault
    (the ground truth contradicts the BFCL schema it ships with)."""
    name = call["function"]["name"]
    issue = dataset_issue(sample, name, json.loads(call["function"]["arguments"]))
    return {
        "id": sample.id,
        "call": call["function"],
        "problems": [p.message for p in checked.problems],
        "dataset_issue": issue,
    }


def dataset_issue(sample: Sample, name: str, arguments: dict[str, Any]) -> str | None:
    """Where the ground truth contradicts its own BFCL schema, judged in BFCL's terms (types as
    BFCL's checker reads them, no JSON Schema involved): such a reject is the dataset's, not
    the converter's or the validator's. Enums are not judged here, so a conversion mistake about
    them still shows up as a false reject."""
    function = sample.functions.get(name)
    if function is None:
        return f"the ground truth calls {name!r}, which the sample does not declare"
    found = bfcl_mismatches(arguments, function["parameters"], "")
    return "; ".join(found) if found else None


BFCL_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "float": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
}


def bfcl_mismatches(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    declared = schema.get("type")
    wanted = BFCL_TYPES.get(declared) if isinstance(declared, str) else None
    if wanted is not None:
        if isinstance(value, bool) and bool not in wanted:
            return [f"{path or 'arguments'}: {value!r} is not a BFCL {declared}"]
        if not isinstance(value, wanted):
            return [f"{path or 'arguments'}: {value!r:.40} is not a BFCL {declared}"]
    found: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        properties = schema["properties"]
        found += [
            f"{_join(path, key)}: the ground truth passes a parameter the function does not have"
            for key in value
            if key not in properties
        ]
        found += [
            f"{_join(path, key)}: required, but the ground truth may omit it"
            for key in schema.get("required", [])
            if key not in value
        ]
        for key, item in value.items():
            if key in properties:
                found += bfcl_mismatches(item, properties[key], _join(path, key))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += bfcl_mismatches(item, schema["items"], f"{path}[{index}]")
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---------------------------------------------------------------- report


def report(result: dict[str, Any]) -> str:
    lines = [
        f"BFCL v4: {result['samples']} samples, {result['tools']} tools "
        f"({result['distinct_schemas']} distinct schemas), {result['calls']} ground-truth calls",
        "",
        f"{'set':<20}{'calls':>7}{'false rejects':>15}{'dataset issues':>16}",
    ]
    for name, counts in result["sets"].items():
        lines.append(
            f"{name:<20}{counts.get('calls', 0):>7}{counts.get('rejects', 0):>15}"
            f"{counts.get('dataset_issues', 0):>16}"
        )
    lines += [
        f"{'all':<20}{result['calls']:>7}{result['false_rejects']:>15}"
        f"{result['dataset_issues']:>16}",
        "",
        f"ground-truth calls changed by cleaning: {result['changed_by_cleaning']}; "
        f"rejected with cleaning off: {result['rejected_without_cleaning']}",
    ]
    for entry in result["false_reject_list"]:
        lines.append(f"  FALSE REJECT {entry['id']}: {entry['problems']}")
    for entry in result["dataset_issue_list"]:
        lines.append(
            f"  dataset issue {entry['id']}: {entry['dataset_issue']}: {entry['problems']}"
        )
    lines += ["", f"{'mutation':<30}{'total':>7}{'caught':>8}{'rate':>9}"]
    for kind, counts in result["mutations"].items():
        lines.append(
            f"{kind:<30}{counts['total']:>7}{counts.get('caught', 0):>8}{counts['rate']:>9.1%}"
        )
    for kind, counts in result["mutations"].items():
        if "suggested" in counts:
            lines.append(
                f"  {kind}: a 'did you mean' in {counts['suggested']} of {counts['total']}, "
                f"naming the ground-truth tool in {counts['suggested the called tool']}"
            )
    for kind, examples in result["missed"].items():
        for example in examples:
            lines.append(f"  MISSED {kind}: {example}")
    lines += ["", f"{'cleaned, must pass':<30}{'total':>7}{'restored':>10}{'rate':>7}"]
    for kind, counts in result["cleaned_variants"].items():
        lines.append(
            f"{kind:<30}{counts['total']:>7}{counts['restored']:>10}{counts['rate']:>7.1%}"
        )
    lines += ["", f"{'latency (ms)':<30}{'n':>7}{'p50':>9}{'p99':>9}{'max':>9}"]
    for what, stats in result["latency"].items():
        lines.append(
            f"{what:<30}{stats['n']:>7}{stats['p50_ms']:>9.3f}{stats['p99_ms']:>9.3f}"
            f"{stats['max_ms']:>9.3f}"
        )
    p99 = max(result["latency"][k]["p99_ms"] for k in ("check_valid_warm", "check_invalid_warm"))
    caught_all = all(c["rate"] == 1 for c in result["mutations"].values())
    lines += [
        "",
        f"targets: false rejects 0: {'PASS' if result['false_rejects'] == 0 else 'FAIL'}; "
        f"mutations 100 % caught: {'PASS' if caught_all else 'FAIL'}; "
        f"warm p99 < 1 ms per call: {'PASS' if p99 < 1 else 'FAIL'} ({p99:.3f} ms)",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- repair, through the gateway

MODEL = "bench-model"
REPAIR_KINDS = tuple(EXPECTED_KIND)
CLEANED_KINDS = ("number as string", "boolean as string", "human date")
GUARD_HEADER = "x-gateway-tool-guard"
FAKE_MODULE = "gateway.testing.fake_upstream"
# Requests between two reads of the fake's request log, which keeps the last 1,000 bodies: a
# batch whose requests reach the upstream at most three times each stays below that.
BATCH = 250
REQUEST_TIMEOUT = 30.0
GUARD_ON, GUARD_OFF = "guard on", "guard off"
VALID, UNGUARDED, CORRECTED, NEVER, CLEANED = (
    "(a) valid",
    "(a) valid, guard off",
    "(b) corrected on feedback",
    "(c) never corrects",
    "cleaned variant",
)
PHASES = (VALID, UNGUARDED, CORRECTED, NEVER, CLEANED)
SERIAL = ", c=1"  # the label of a phase also run one request at a time (no queueing)
LABELS = (*PHASES, VALID + SERIAL, UNGUARDED + SERIAL, CORRECTED + SERIAL)


@dataclass(frozen=True)
class RepairOptions:
    samples: int
    concurrency: int
    rounds: int
    baseline_repeat: int
    max_seconds: float
    repair_attempts: int = 2  # the gateway's default, which the guard-on gateway runs with


@dataclass(frozen=True)
class Case:
    """One chat request and what the client must get back."""

    key: str  # sent as `user`, which repairs keep: the fake's request log is grouped by it
    scenario: str
    kind: str
    sample: Sample
    body: bytes
    bad_index: int | None  # the call the scripted model gets wrong

    def wanted(self) -> list[dict[str, Any]]:
        """The calls the client must receive: the ground truth, or, from a model that never
        corrects, the ground truth without the call it keeps getting wrong."""
        if self.scenario == NEVER:
            return [c for i, c in enumerate(self.sample.calls) if i != self.bad_index]
        return self.sample.calls


@dataclass
class Reply:
    case: Case
    seconds: float
    status: int = 0
    outcome: str | None = None  # the x-gateway-tool-guard header
    message: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    upstream_calls: int = 0
    error: str | None = None

    @property
    def calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])


def scripted(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A fake-upstream reply answering with `calls` (OpenAI tool calls)."""
    return {
        "tool_calls": [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in calls
        ]
    }


def make_case(
    scenario: str,
    kind: str,
    sample: Sample,
    replies: list[list[dict[str, Any]]],
    bad_index: int | None = None,
) -> Case:
    key = f"{scenario}|{kind}|{sample.id}"
    body = {
        "model": MODEL,
        "messages": sample.messages,
        "tools": sample.tools,
        "user": key,
        "fake": {"replies": [scripted(calls) for calls in replies]},
    }
    return Case(key, scenario, kind, sample, json.dumps(body).encode(), bad_index)


def pick_samples(samples: list[Sample], count: int, rng: random.Random) -> list[Sample]:
    """`count` samples spread evenly over the sets, among those whose ground truth is valid as
    it is (the dataset's contradictions, and calls cleaning would change, left out)."""
    cache = ValidatorCache(max_entries=100_000)
    by_set: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        catalog = ToolCatalog.from_request(sample.tools, {}, True, cache=cache)
        checks = [catalog.check(call) for call in sample.calls]
        if all(c.ok and not c.changes for c in checks):
            by_set[sample.set_name].append(sample)
    names = sorted(by_set)
    chosen: list[Sample] = []
    for i, name in enumerate(names):
        quota = count // len(names) + (i < count % len(names))
        chosen += rng.sample(by_set[name], min(quota, len(by_set[name])))
    return chosen


def repair_cases(
    samples: list[Sample], pool: list[str], rng: random.Random, attempts: int
) -> dict[str, list[Case]]:
    """The requests of each phase. Per sample and mutation kind, one call (at random among
    those the kind applies to) is replaced by its mutation; the sample's other calls stay."""
    phases: dict[str, list[Case]] = {phase: [] for phase in PHASES}
    for sample in samples:
        good = sample.calls
        phases[VALID].append(make_case(VALID, "valid", sample, [good]))
        phases[UNGUARDED].append(make_case(UNGUARDED, "valid", sample, [good]))
        by_kind: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for index, call in enumerate(good):
            for kind, mutated in mutations(sample, call, pool, rng):
                by_kind[kind].append((index, {**mutated, "id": call["id"]}))
        for kind in (*REPAIR_KINDS, *CLEANED_KINDS):
            if not by_kind[kind]:
                continue
            index, mutated = rng.choice(by_kind[kind])
            bad = [*good[:index], mutated, *good[index + 1 :]]
            if kind in CLEANED_KINDS:
                phases[CLEANED].append(make_case(CLEANED, kind, sample, [bad], index))
                continue
            phases[CORRECTED].append(make_case(CORRECTED, kind, sample, [bad, good], index))
            never = [bad] * (attempts + 1)
            phases[NEVER].append(make_case(NEVER, kind, sample, never, index))
    return phases


# --- servers


@dataclass(frozen=True)
class Gateway:
    url: str  # chat completions
    server: Server


def start_repair_servers(
    workdir: Path, attempts: int, servers: list[Server]
) -> tuple[str, dict[str, Gateway]]:
    """The fake upstream, and two gateways in front of it: the tool guard on (repair_attempts,
    on_failure strip) and off. Access log and cache off (no cache section) in both."""
    env = {"PYTHONPATH": pythonpath(REPO)}
    fake = Server("fake-upstream", [sys.executable, "-m", FAKE_MODULE, "--port", "0"], workdir, env)
    servers.append(fake)
    fake_url = fake.wait_ready(fake.log_url, 30)
    gateways = {}
    for name, guard in (
        (GUARD_ON, f"{{enabled: true, repair_attempts: {attempts}, on_failure: strip}}"),
        (GUARD_OFF, "{enabled: false}"),
    ):
        slug = "gateway-" + name.replace(" ", "-")
        config = workdir / f"{slug}.yaml"
        config.write_text(
            "server: {host: 127.0.0.1, port: 0, access_log: false}\n"
            "providers:\n"
            f"  fake: {{type: openai, base_url: '{fake_url}/v1'}}\n"
            f"models:\n  - {{name: {MODEL}, provider: fake}}\n"
            f"guard: {{tools: {guard}}}\n"
        )
        argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", "0"]
        server = Server(slug, argv, workdir, env)
        servers.append(server)
        base = server.wait_ready(server.log_url, 60)
        gateways[name] = Gateway(base + "/v1/chat/completions", server)
    return fake_url, gateways


# --- load


async def send_batch(
    session: aiohttp.ClientSession, url: str, cases: list[Case], concurrency: int
) -> list[Reply]:
    """`cases` from `concurrency` workers; each reply timed until its body is read."""
    todo = iter(cases)
    replies: list[Reply] = []

    async def worker() -> None:
        for case in todo:
            started = time.perf_counter()
            try:
                async with session.post(url, data=case.body, headers=JSON_HEADERS) as resp:
                    raw = await resp.read()
                    reply = Reply(case, time.perf_counter() - started, resp.status)
                    reply.outcome = resp.headers.get(GUARD_HEADER)
            except (TimeoutError, aiohttp.ClientError) as exc:
                replies.append(Reply(case, time.perf_counter() - started, error=repr(exc)))
                continue
            try:
                choice = json.loads(raw)["choices"][0]
                reply.message, reply.finish_reason = choice["message"], choice["finish_reason"]
            except (ValueError, KeyError, IndexError, TypeError):
                reply.error = f"HTTP {reply.status}: {raw[:300]!r}"
            replies.append(reply)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return replies


@dataclass
class PhaseRun:
    """One phase's requests against one gateway in one round."""

    replies: list[Reply]
    cpu_ms: float  # the gateway process's CPU time per request
    log_gaps: int  # upstream requests missing from the fake's log (it keeps the last 1,000)

    @property
    def p50_ms(self) -> float:
        return percentile([r.seconds for r in self.replies if r.status == 200], 50)

    @property
    def p99_ms(self) -> float:
        return percentile([r.seconds for r in self.replies if r.status == 200], 99)


async def run_phase(
    session: aiohttp.ClientSession, fake_url: str, gateway: Gateway, cases: list[Case], conc: int
) -> PhaseRun:
    """`cases` against one gateway, in batches; each reply gets its count of upstream calls."""
    replies: list[Reply] = []
    cpu, gaps = 0.0, 0
    for start in range(0, len(cases), BATCH):
        async with session.delete(fake_url + "/_fake/requests") as resp:
            resp.raise_for_status()
        before = await fake_requests_served(session, fake_url)
        cpu_before = cpu_seconds(gateway.server.proc.pid)
        done = await send_batch(session, gateway.url, cases[start : start + BATCH], conc)
        cpu += cpu_seconds(gateway.server.proc.pid) - cpu_before
        async with session.get(fake_url + "/_fake/requests") as resp:
            received = await resp.json()
        gaps += await fake_requests_served(session, fake_url) - before - len(received)
        counts = Counter(
            r["body"].get("user") for r in received if r["path"] == "/v1/chat/completions"
        )
        for reply in done:
            reply.upstream_calls = counts[reply.case.key]
        replies += done
    return PhaseRun(replies, cpu * 1000 / max(1, len(replies)), gaps)


async def fake_requests_served(session: aiohttp.ClientSession, fake_url: str) -> int:
    async with session.get(fake_url + "/_fake/stats") as resp:
        return int((await resp.json())["requests"])


def pooled(runs: list[PhaseRun]) -> PhaseRun:
    """Several passes of one phase in a round, as one run."""
    replies = [r for run in runs for r in run.replies]
    cpu = sum(run.cpu_ms * len(run.replies) for run in runs) / max(1, len(replies))
    return PhaseRun(replies, cpu, sum(run.log_gaps for run in runs))


async def repair_rounds(
    fake_url: str, gateways: dict[str, Gateway], phases: dict[str, list[Case]], opts: RepairOptions
) -> dict[str, list[PhaseRun]]:
    """A warm-up, then rounds of every phase: {phase: one PhaseRun per round}."""
    runs: dict[str, list[PhaseRun]] = defaultdict(list)
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    connector = aiohttp.TCPConnector(limit=opts.concurrency + 2)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:

        async def phase(name: str, target: str, concurrency: int) -> PhaseRun:
            return await run_phase(session, fake_url, gateways[target], phases[name], concurrency)

        # Warm-up: every schema compiled and connections open, on both gateways.
        await phase(VALID, GUARD_ON, opts.concurrency)
        await phase(UNGUARDED, GUARD_OFF, opts.concurrency)
        round_seconds = 0.0
        for round_no in range(opts.rounds):
            if round_no and time.monotonic() - started + round_seconds > opts.max_seconds:
                progress(f"  time limit ({opts.max_seconds:.0f} s): {round_no} round(s) done")
                break
            round_started = time.monotonic()
            # The valid requests on both gateways, interleaved, which goes first alternating.
            passes: dict[str, list[PhaseRun]] = {VALID: [], UNGUARDED: []}
            pairs = [(VALID, GUARD_ON), (UNGUARDED, GUARD_OFF)]
            for i in range(opts.baseline_repeat):
                for name, target in pairs if (i + round_no) % 2 == 0 else pairs[::-1]:
                    passes[name].append(await phase(name, target, opts.concurrency))
            for name in (VALID, UNGUARDED):
                runs[name].append(pooled(passes[name]))
            for name in (CORRECTED, NEVER, CLEANED):
                runs[name].append(await phase(name, GUARD_ON, opts.concurrency))
            # One at a time: what a request costs without waiting behind others.
            for name, target in pairs if round_no % 2 == 0 else pairs[::-1]:
                runs[name + SERIAL].append(await phase(name, target, 1))
            runs[CORRECTED + SERIAL].append(await phase(CORRECTED, GUARD_ON, 1))
            round_seconds = time.monotonic() - round_started
            line = ", ".join(f"{name} {runs[name][-1].p50_ms:.2f}" for name in LABELS)
            progress(f"  round {round_no + 1} ({round_seconds:.0f} s), p50 ms: {line}")
    return runs


# --- judging and summary


@dataclass(frozen=True)
class Expected:
    outcome: str | None
    upstream_calls: int
    same_text: bool  # the calls come back byte for byte (cleaned ones are re-serialized)


def expectation(scenario: str, attempts: int) -> Expected:
    return {
        VALID: Expected("ok", 1, True),
        UNGUARDED: Expected(None, 1, True),
        CORRECTED: Expected("repaired", 2, True),
        NEVER: Expected("stripped", attempts + 1, True),
        CLEANED: Expected("cleaned", 1, False),
    }[scenario]


def call_key(call: dict[str, Any], same_text: bool) -> tuple[Any, ...]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not same_text and isinstance(arguments, str):
        arguments = json.loads(arguments)
    return call.get("id"), function.get("name"), arguments


class Judge:
    def __init__(self, attempts: int) -> None:
        self.attempts = attempts
        self.cache = ValidatorCache(max_entries=100_000)
        self.catalogs: dict[str, ToolCatalog] = {}

    def wrong(self, reply: Reply) -> list[str]:
        """How the reply differs from what the client must get (empty: as expected)."""
        if reply.error:
            return [reply.error]
        if reply.status != 200:
            return [f"HTTP {reply.status}"]
        want = expectation(reply.case.scenario, self.attempts)
        found = []
        if reply.outcome != want.outcome:
            found.append(f"outcome {reply.outcome!r}, not {want.outcome!r}")
        wanted = reply.case.wanted()
        if [call_key(c, want.same_text) for c in reply.calls] != [
            call_key(c, want.same_text) for c in wanted
        ]:
            found.append(f"calls {[c.get('function') for c in reply.calls]}")
        finish = "tool_calls" if wanted else "stop"
        if reply.finish_reason != finish:
            found.append(f"finish_reason {reply.finish_reason!r}, not {finish!r}")
        if not wanted and not (reply.message.get("content") or "").strip():
            found.append("every call stripped, and no text for the client")
        if reply.upstream_calls != want.upstream_calls:
            found.append(f"{reply.upstream_calls} upstream calls, not {want.upstream_calls}")
        return found

    def leaked(self, reply: Reply) -> list[str]:
        """What the client got that the guard must never let through: a call to an undeclared
        tool, or arguments that break the tool's schema (judged without cleaning)."""
        sample = reply.case.sample
        catalog = self.catalogs.get(sample.id)
        if catalog is None:
            catalog = ToolCatalog.from_request(sample.tools, {}, False, cache=self.cache)
            self.catalogs[sample.id] = catalog
        return [str(p) for call in reply.calls for p in catalog.check(call).problems]


def median_over_rounds(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def summarize_repair(
    runs: dict[str, list[PhaseRun]], opts: RepairOptions, samples: list[Sample]
) -> dict[str, Any]:
    judge = Judge(opts.repair_attempts)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for label in LABELS:
        for round_no, run in enumerate(runs.get(label, [])):
            for reply in run.replies:
                kind = "(all)" if label.endswith(SERIAL) else reply.case.kind
                row = rows.setdefault(
                    (label, kind),
                    {
                        "requests": 0,
                        "as_expected": 0,
                        "leaked": 0,
                        "outcomes": Counter(),
                        "upstream_calls": Counter(),
                        "p50_by_round": defaultdict(list),
                        "wrong": [],
                    },
                )
                row["requests"] += 1
                wrong = judge.wrong(reply)
                row["as_expected"] += not wrong
                row["outcomes"][str(reply.outcome)] += 1
                row["upstream_calls"][reply.upstream_calls] += 1
                if reply.status == 200:
                    row["p50_by_round"][round_no].append(reply.seconds)
                leaks = judge.leaked(reply) if reply.case.scenario != UNGUARDED else []
                row["leaked"] += bool(leaks)
                if (wrong or leaks) and len(row["wrong"]) < 5:
                    row["wrong"].append({"key": reply.case.key, "wrong": wrong, "leaked": leaks})
    table = []
    for (label, kind), row in rows.items():
        calls = row["upstream_calls"]
        p50s = [percentile(v, 50) for v in row.pop("p50_by_round").values()]
        table.append(
            {
                "phase": label,
                "kind": kind,
                **row,
                "rate": row["as_expected"] / row["requests"],
                "outcomes": dict(row["outcomes"]),
                "upstream_calls": {str(k): v for k, v in sorted(calls.items())},
                "upstream_calls_mean": sum(k * v for k, v in calls.items()) / row["requests"],
                "p50_ms": median_over_rounds(p50s),
            }
        )
    return {
        "options": asdict(opts),
        "samples": len(samples),
        "samples_per_set": dict(Counter(s.set_name for s in samples)),
        "calls": sum(len(s.calls) for s in samples),
        "rounds": len(runs.get(CLEANED, [])),
        "rows": table,
        "latency": repair_latency(runs, opts.repair_attempts),
        "fake_log_gaps": sum(run.log_gaps for phase_runs in runs.values() for run in phase_runs),
    }


def paired(runs: dict[str, list[PhaseRun]], a: str, b: str, fn: Callable[..., float]) -> float:
    """Median over rounds of fn(a's run, b's run) from the same round."""
    return median_over_rounds([fn(x, y) for x, y in zip(runs[a], runs[b], strict=False)])


def repair_latency(runs: dict[str, list[PhaseRun]], attempts: int) -> dict[str, Any]:
    phases = {
        name: {
            "n_per_round": len(runs[name][0].replies) if runs[name] else 0,
            "p50_ms": median_over_rounds([r.p50_ms for r in runs[name]]),
            "p99_ms": median_over_rounds([r.p99_ms for r in runs[name]]),
            "gateway_cpu_ms_per_request": median_over_rounds([r.cpu_ms for r in runs[name]]),
            "p50_by_round": [r.p50_ms for r in runs[name]],
            "p99_by_round": [r.p99_ms for r in runs[name]],
        }
        for name in LABELS
    }

    def vs(a: str, b: str) -> dict[str, float]:
        return {
            "added_p50_ms": paired(runs, a, b, lambda x, y: x.p50_ms - y.p50_ms),
            "added_p99_ms": paired(runs, a, b, lambda x, y: x.p99_ms - y.p99_ms),
            "p50_ratio": paired(runs, a, b, lambda x, y: x.p50_ms / y.p50_ms),
            "p99_ratio": paired(runs, a, b, lambda x, y: x.p99_ms / y.p99_ms),
            "added_cpu_ms": paired(runs, a, b, lambda x, y: x.cpu_ms - y.cpu_ms),
        }

    never = vs(NEVER, VALID)
    return {
        "phases": phases,
        "guard_on_vs_off": vs(VALID, UNGUARDED),
        "guard_on_vs_off_c1": vs(VALID + SERIAL, UNGUARDED + SERIAL),
        "one_repair_round": vs(CORRECTED, VALID),
        "one_repair_round_c1": vs(CORRECTED + SERIAL, VALID + SERIAL),
        "never_corrects": never,
        "per_repair_round_when_never_corrects_p50_ms": never["added_p50_ms"] / attempts,
        "cleaned_vs_valid": vs(CLEANED, VALID),
    }


def report_repair(result: dict[str, Any]) -> str:
    per_set = ", ".join(f"{k} {v}" for k, v in sorted(result["samples_per_set"].items()))
    lines = [
        f"Repair through the gateway: {result['samples']} BFCL samples ({per_set}), "
        f"{result['calls']} ground-truth calls; {result['rounds']} round(s), concurrency "
        f"{result['options']['concurrency']}, repair_attempts "
        f"{result['options']['repair_attempts']}, on_failure strip",
        "",
        f"{'phase':<32}{'kind':<22}{'requests':>9}{'as expected':>13}{'leaked':>8}"
        f"{'upstream calls':>16}{'p50 ms':>9}  outcomes",
    ]
    for row in result["rows"]:
        calls = " ".join(f"{k}x{v}" for k, v in row["upstream_calls"].items())
        outcomes = ", ".join(f"{k} {v}" for k, v in row["outcomes"].items())
        lines.append(
            f"{row['phase']:<32}{row['kind']:<22}{row['requests']:>9}{row['rate']:>13.1%}"
            f"{row['leaked']:>8}{calls:>16}{fmt(row['p50_ms'], '.2f'):>9}  {outcomes}"
        )
    for row in result["rows"]:
        for example in row["wrong"]:
            lines.append(f"  WRONG {example['key']}: {example['wrong']} {example['leaked']}")
    lat = result["latency"]
    lines += [
        "",
        f"{'latency, medians over rounds':<32}{'n/round':>8}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'gateway CPU ms/req':>20}",
    ]
    for name, stats in lat["phases"].items():
        lines.append(
            f"{name:<32}{stats['n_per_round']:>8}{fmt(stats['p50_ms'], '.2f'):>9}"
            f"{fmt(stats['p99_ms'], '.2f'):>9}{fmt(stats['gateway_cpu_ms_per_request'], '.3f'):>20}"
        )
    lines.append("")
    for what, key in (
        ("guard on vs off, valid calls", "guard_on_vs_off"),
        ("  the same, c=1", "guard_on_vs_off_c1"),
        ("one repair round (b) vs (a)", "one_repair_round"),
        ("  the same, c=1", "one_repair_round_c1"),
        ("never corrects (c) vs (a)", "never_corrects"),
        ("cleaned variant vs (a)", "cleaned_vs_valid"),
    ):
        d = lat[key]
        lines.append(
            f"{what:<32} p50 {fmt(d['added_p50_ms'], '+.2f')} ms "
            f"(x{fmt(d['p50_ratio'], '.2f')}), p99 {fmt(d['added_p99_ms'], '+.2f')} ms "
            f"(x{fmt(d['p99_ratio'], '.2f')}), gateway CPU {fmt(d['added_cpu_ms'], '+.3f')} ms/req"
        )
    repaired = [r for r in result["rows"] if r["phase"] == CORRECTED]
    stripped = [r for r in result["rows"] if r["phase"] == NEVER]
    leaks = sum(r["leaked"] for r in result["rows"])
    all_ok = all(r["rate"] == 1 for r in result["rows"])
    lines += [
        "",
        f"targets: repaired 100 % per kind: "
        f"{'PASS' if all(r['rate'] == 1 for r in repaired) else 'FAIL'}; "
        f"never-correcting ends stripped: "
        f"{'PASS' if all(r['rate'] == 1 for r in stripped) else 'FAIL'}; "
        f"nothing invalid reaches the client: {'PASS' if leaks == 0 else f'FAIL ({leaks})'}; "
        f"every phase as expected: {'PASS' if all_ok else 'FAIL'}",
    ]
    if result["fake_log_gaps"]:
        lines.append(f"the fake's log missed {result['fake_log_gaps']} upstream requests")
    return "\n".join(lines)


def run_repair(set_names: list[str], opts: RepairOptions) -> dict[str, Any]:
    everything = [s for name in set_names for s in load(name)]
    pool = sorted({t["function"]["name"] for s in everything for t in s.tools})
    rng = random.Random(SEED)
    samples = pick_samples(everything, opts.samples, rng)
    phases = repair_cases(samples, pool, rng, opts.repair_attempts)
    sizes = ", ".join(f"{name} {len(cases)}" for name, cases in phases.items())
    progress(f"repair: {len(samples)} samples; requests per round: {sizes}")
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="tool-guard-bench-") as tmp:
        try:
            fake_url, gateways = start_repair_servers(Path(tmp), opts.repair_attempts, servers)
            load_before = load_average()
            progress(f"  {os.cpu_count()} cpus, load average {load_before}")
            runs = uvloop.run(repair_rounds(fake_url, gateways, phases, opts))
        finally:
            for server in reversed(servers):
                server.stop()
    result = summarize_repair(runs, opts, samples)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }
    return result


def progress(line: str) -> None:
    """Progress on stderr, so that --json output stays parseable."""
    print(line, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--section",
        choices=["validate", "repair", "all"],
        default="validate",
        help="validate: in-process validation (default); repair: through the gateway over HTTP",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument(
        "--repeat", type=int, default=5, help="validate: warm passes over all calls"
    )
    parser.add_argument("--samples", type=int, default=300, help="repair: BFCL samples")
    parser.add_argument("--concurrency", type=int, default=8, help="repair: requests in flight")
    parser.add_argument("--rounds", type=int, default=5, help="repair: rounds of every phase")
    parser.add_argument(
        "--baseline-repeat",
        type=int,
        default=3,
        help="repair: passes of the valid requests per round, on each gateway",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=300,
        help="repair: no new round once this is spent (the first always runs)",
    )
    args = parser.parse_args()
    if not (BFCL / "possible_answer").is_dir():
        print(f"BFCL data not found at {BFCL} (see ../shared/datasets/README.md)", file=sys.stderr)
        return 2
    sets = args.sets.split(",")
    results: dict[str, Any] = {}
    if args.section in ("validate", "all"):
        results["validate"] = run(sets, args.repeat)
    if args.section in ("repair", "all"):
        opts = RepairOptions(
            args.samples, args.concurrency, args.rounds, args.baseline_repeat, args.max_seconds
        )
        results["repair"] = run_repair(sets, opts)
    if args.json:
        out = results if args.section == "all" else results[args.section]
        print(json.dumps(out, indent=2, default=str))
    else:
        reports = {"validate": report, "repair": report_repair}
        print("\n\n".join(reports[name](result) for name, result in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
