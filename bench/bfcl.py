"""BFCL v4 as OpenAI `tools` and `tool_calls`, and mutations of its calls, for
bench/tool_guard.py (which says what is measured).

Conversion of BFCL's schema dialect: `dict` -> object, `float` -> number, `tuple` -> array,
`any` -> no type; BFCL's `optional` annotation is dropped (`required` says the same); dots in
function names become underscores; objects with a fixed `properties` list get
`additionalProperties: false` (BFCL functions take exactly the parameters they list; open dicts
without `properties`, such as `gradeDict`, stay open). A ground-truth call takes the first
allowed value of each parameter, and leaves out parameters whose first allowed value is ""
(BFCL's "may be omitted"); nested dicts are resolved the same way, recursively.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

BFCL = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "tools" / "bfcl"
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
SEED = 20240601


# ---------------------------------------------------------------- data and conversion


@dataclass
class Sample:
    set_name: str
    id: str
    tools: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    functions: dict[str, dict[str, Any]]  # by OpenAI name: the BFCL function as shipped
    messages: list[dict[str, Any]] = field(default_factory=list)  # the question's first turn


def convert_schema(schema: Any, closed: bool = True) -> Any:
    """A BFCL parameter schema in JSON Schema (see the module docstring); `closed=False` leaves
    `additionalProperties` unsaid, as most clients' tool schemas do."""
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
            out["properties"] = {name: convert_schema(sub, closed) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = convert_schema(value, closed)
        else:
            out[key] = value
    if closed and out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    if out.get("type") == "array" and "enum" in out:
        # BFCL puts the allowed values of an array's items on the array itself.
        out["items"] = {**out.get("items", {}), "enum": out.pop("enum")}
    return out


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def convert_tool(function: dict[str, Any], closed: bool = True) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": openai_name(function["name"]),
            "description": function.get("description", ""),
            "parameters": convert_schema(function["parameters"], closed),
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


def load(set_name: str, closed: bool = True) -> list[Sample]:
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
        tools = [convert_tool(f, closed) for f in row["function"]]
        sample = Sample(set_name, row["id"], tools, [], functions, row["question"][0])
        for index, answer in enumerate(truth[row["id"]]):
            [(name, params)] = answer.items()  # params: a list of allowed values per parameter
            sample.calls.append(tool_call(openai_name(name), resolve(params), f"call_{index}"))
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
            rest = {k: v for k, v in arguments.items() if k != param}
            yield "missing required", tool_call(name, rest)
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


def _outside(enum: list[Any]) -> Any:
    if all(isinstance(v, str) for v in enum):
        candidate = f"{enum[0]}_other"
        while candidate in enum:
            candidate += "_"
        return candidate
    numbers = [v for v in enum if isinstance(v, int | float) and not isinstance(v, bool)]
    return (max(numbers) + 1) if numbers else "not_in_enum"


# Names models add that a tool did not declare (plausible ones, as real models invent them).
PLAUSIBLE_EXTRAS = ("verbose", "language", "format", "limit", "timeout", "user_id", "debug")


def undeclared_mutations(
    sample: Sample, call: dict[str, Any], rng: random.Random
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, mutated call): parameters the tool does not declare, at the top level. Kinds:
    an added name (a plausible one, and a random one), a given parameter's name misspelled (its
    value moves to an undeclared name), a given name in another case or separators (must be
    renamed back), an enum value in another case (must be recased)."""
    name = call["function"]["name"]
    arguments = json.loads(call["function"]["arguments"])
    properties = parameters_of(sample, name).get("properties", {})
    plausible = [n for n in PLAUSIBLE_EXTRAS if n not in properties]
    if plausible:
        added = {**arguments, rng.choice(plausible): "x"}
        yield "added: plausible name", tool_call(name, added)
    random_name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
    yield "added: random name", tool_call(name, {**arguments, random_name: 1})
    for param in arguments:
        taken = set(properties)
        misspelled = misspell(param, taken, rng)
        if misspelled in taken or _folded(misspelled) in {_folded(p) for p in taken}:
            continue  # the misspelling is another declared name, or only a case change
        renamed = {misspelled if k == param else k: v for k, v in arguments.items()}
        yield "misspelled given name", tool_call(name, renamed)
    for param in arguments:
        variant = _case_variant(param)
        same_form = [p for p in properties if _folded(p) == _folded(param)]
        if variant != param and variant not in properties and len(same_form) == 1:
            renamed = {variant if k == param else k: v for k, v in arguments.items()}
            yield "name in another case or separators", tool_call(name, renamed)
    for param, value in arguments.items():
        enum = properties.get(param, {}).get("enum")
        if not (enum and isinstance(value, str)) or value.swapcase() == value:
            continue
        if sum(isinstance(v, str) and v.casefold() == value.casefold() for v in enum) == 1:
            yield (
                "enum value in another case",
                tool_call(name, {**arguments, param: value.swapcase()}),
            )


def _folded(name: str) -> str:
    return name.replace("_", "").replace("-", "").casefold()


def _case_variant(name: str) -> str:
    """snake_case -> camelCase; otherwise the first letter's case flipped."""
    head, *rest = name.split("_")
    if rest and all(rest):
        return head + "".join(part[:1].upper() + part[1:] for part in rest)
    return name[:1].swapcase() + name[1:]


EXPECTED_KIND = {
    "misspelled name": "unknown_tool",
    "invented name": "unknown_tool",
    "missing required": "schema",
    "unexpected parameter": "schema",
    "wrong type": "schema",
    "outside enum": "schema",
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
