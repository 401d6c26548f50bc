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

    python bench/tool_guard.py [--json] [--repeat N] [--sets simple_python,multiple,...]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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

from procs import percentile  # noqa: E402

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
        sample = Sample(
            set_name, row["id"], [convert_tool(f) for f in row["function"]], [], functions
        )
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--repeat", type=int, default=5, help="warm passes over all calls")
    parser.add_argument("--sets", default=",".join(SETS))
    args = parser.parse_args()
    if not (BFCL / "possible_answer").is_dir():
        print(f"BFCL data not found at {BFCL} (see ../shared/datasets/README.md)", file=sys.stderr)
        return 2
    result = run(args.sets.split(","), args.repeat)
    print(json.dumps(result, indent=2, default=str) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
