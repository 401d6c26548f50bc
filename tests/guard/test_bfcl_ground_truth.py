"""BFCL's ground-truth calls pass the tool guard under its default policies (no false reject),
with the tools' schemas written as most clients write them (nothing said about other names)
and closed (`additionalProperties: false`). The vendored live_simple set always runs; the
other sets where ../shared is present. bench/tool_guard.py measures the same at full size,
with mutations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.guard import ToolGuardConfig
from gateway.guard.schemas import ValidatorCache
from gateway.guard.tools import ToolCatalog

Json = dict[str, Any]
VENDORED = Path(__file__).resolve().parents[1] / "data" / "datasets" / "tools" / "bfcl"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "tools" / "bfcl"
SETS = ["live_simple", "simple_python", "multiple", "parallel", "parallel_multiple"]
TYPES = {"dict": "object", "float": "number", "tuple": "array"}
# Where the ground truth contradicts the schema it ships with (docs/BENCHMARKS.md lists them):
# required parameters it may omit, strings for arrays of numbers, a parameter the function
# lacks, words for integers.
CONTRADICTIONS = {
    "simple_python_200",
    "live_simple_106-63-0",
    "live_simple_112-68-0",
    "parallel_multiple_21",
    "parallel_multiple_26",
    "parallel_multiple_94",
}
CACHE = ValidatorCache(max_entries=10_000)


def json_schema(bfcl: Any, closed: bool) -> Any:
    """BFCL's dialect in JSON Schema: dict, float, tuple, any; array enums on the items."""
    if not isinstance(bfcl, dict):
        return bfcl
    out: Json = {}
    for key, value in bfcl.items():
        if key == "type":
            if value != "any":
                out["type"] = TYPES.get(value, value)
        elif key == "properties":
            out[key] = {name: json_schema(sub, closed) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = json_schema(value, closed)
        elif key != "optional":
            out[key] = value
    if out.get("type") == "array" and "enum" in out:
        out["items"] = {**out.get("items", {}), "enum": out.pop("enum")}
    if closed and out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def chosen(allowed: Any) -> tuple[bool, Any]:
    """(given?, value): the first allowed value; "" first is BFCL's "may be omitted"."""
    if not isinstance(allowed, list):
        return True, resolved(allowed)
    if not allowed or allowed[0] == "":
        return False, None
    return True, resolved(allowed[0])


def resolved(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, (given, v) in ((k, chosen(a)) for k, a in value.items()) if given}
    if isinstance(value, list):
        return [resolved(item) if isinstance(item, dict | list) else item for item in value]
    return value


def samples(set_name: str) -> list[tuple[str, list[Json], list[Json]]]:
    """(id, tools, calls) of one BFCL set, read from the vendored copy or ../shared."""
    base = (
        VENDORED
        if (VENDORED / "possible_answer" / f"BFCL_v4_{set_name}.json").is_file()
        else SHARED
    )
    questions = base / f"BFCL_v4_{set_name}.json"
    answers = base / "possible_answer" / f"BFCL_v4_{set_name}.json"
    if not answers.is_file():
        pytest.skip(f"{answers} is absent (../shared is beside the repository in development)")
    truth = {}
    for line in answers.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        truth[row["id"]] = row["ground_truth"]
    out = []
    for line in questions.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        functions = {f["name"].replace(".", "_"): f for f in row["function"]}
        calls = []
        for answer in truth[row["id"]]:
            [(name, params)] = answer.items()
            arguments = resolved(params)
            calls.append(
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {
                        "name": name.replace(".", "_"),
                        "arguments": json.dumps(arguments),
                    },
                }
            )
        tools = [{"name": name, "parameters": f["parameters"]} for name, f in functions.items()]
        out.append((row["id"], tools, calls))
    return out


def catalog(tools: list[Json], closed: bool) -> ToolCatalog:
    defaults = ToolGuardConfig()
    entries = [
        {
            "type": "function",
            "function": {"name": t["name"], "parameters": json_schema(t["parameters"], closed)},
        }
        for t in tools
    ]
    return ToolCatalog.from_request(
        entries, {}, defaults.clean, undeclared=defaults.undeclared_parameters, cache=CACHE
    )


@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
@pytest.mark.parametrize("set_name", SETS)
def test_no_ground_truth_call_is_rejected_under_the_defaults(set_name: str, closed: bool) -> None:
    rejected, total = [], 0
    for sample_id, tools, calls in samples(set_name):
        if sample_id in CONTRADICTIONS:
            continue
        tools_catalog = catalog(tools, closed)
        for call in calls:
            total += 1
            checked = tools_catalog.check(call)
            if not checked.ok:
                rejected.append((sample_id, [str(p) for p in checked.problems]))
    assert total >= 200  # the smallest set, multiple, has 200 calls
    assert rejected == []
