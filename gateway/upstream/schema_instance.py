"""A small JSON value valid against a JSON Schema, for the demo provider's structured answers
(`response_format: json_schema`) and tool-call arguments.

The value is built keyword by keyword: types (a list, or inferred from the keywords present),
properties and required, enum and const, anyOf/oneOf/allOf, local `$ref`s (`#/$defs/...` as
pydantic writes them, `#/definitions/...`, `#`), array and string bounds, number ranges and
multipleOf, common formats and simple patterns. Where there is a choice (an enum, a union, a
list of types) each candidate is checked with the tool guard's validators and the first valid
one wins. What cannot be satisfied (a pattern it cannot invert, an unresolvable `$ref`, a
contradiction) gets a best attempt: a demo answer never fails over a schema. Recursion is
bounded: past half of MAX_DEPTH, only what is required is built, and null alternatives are
preferred, so recursive models end.

Schemas come from clients, so the work is bounded too: at most MAX_TRIES alternatives (or enum
members) are tried at each choice, so a union of N branches costs N, not N squared; all the
checks of one answer spend from one `Budget` (BUILD_SECONDS), after which every candidate
counts as valid and the value is built without checks (linear in the schema); a schema over
MAX_SCHEMA_BYTES is built unchecked from the start. Validators come from a cache of the demo's
own, so a flood of schemas through the demo never evicts a tenant's tool validators.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from gateway.guard.schemas import Budget, BudgetSpent, ValidatorCache, search

MAX_DEPTH = 16
MAX_ITEMS = 32  # an array never gets more items than this, whatever minItems says
MAX_CHARS = 4096
TEXT_CHARS = 64  # strings default to the start of the question, as tool arguments do
MAX_TRIES = 16  # alternatives, enum members: the first this many are tried, in order
BUILD_SECONDS = 0.25  # the checks of one answer (all its choices), in all
MAX_SCHEMA_BYTES = 256 * 1024  # larger schemas are built without checks
CACHE = ValidatorCache(128, max_bytes=16 * 1024 * 1024)

# Example values for formats, each valid for the guard's (and jsonschema's) format checkers.
FORMATS = {
    "date": "2024-01-31",
    "date-time": "2024-01-31T09:30:00Z",
    "time": "09:30:00Z",
    "duration": "P1D",
    "email": "demo@example.com",
    "idn-email": "demo@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/demo",
    "iri": "https://example.com/demo",
    "uri-reference": "https://example.com/demo",
    "url": "https://example.com/demo",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
    "regex": "demo",
    "json-pointer": "/demo",
}
# Type names of looser dialects (BFCL and other hand-written tool schemas).
TYPE_ALIASES = {"dict": "object", "float": "number", "tuple": "array", "int": "integer"}
JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
# Tried in turn when what was built is not valid (a `not`, an `if`, a contradiction).
GENERIC_VALUES: tuple[Any, ...] = ("demo", 0, 1, 0.5, True, False, None, {}, [], "")
_RESOLVED_CHAIN = 32  # $ref to $ref to ...: give up after this many

_parser: Any = importlib.import_module("re._parser")  # the `re` module's own pattern parser


def instance(
    schema: Any, text: str = "demo", variant: int = 0, budget: Budget | None = None
) -> Any:
    """A value valid against `schema`, as small as its constraints allow. Strings default to
    `text`; `variant` > 0 makes a different value where the schema leaves room (n choices).
    `budget`: the time its checks may take (shared by the choices of one answer)."""
    budget = budget or Budget(BUILD_SECONDS)
    with budget.running():
        validator = _validator(schema)
        builder = _Builder(schema, validator, (text.strip() or "demo")[:TEXT_CHARS])
        try:
            value = builder.build(schema, 0, variant)
        except RecursionError:
            value = None
        if builder.valid(value, schema):
            return value
        return next((v for v in GENERIC_VALUES if builder.valid(v, schema)), value)


def is_valid(schema: Any, value: Any, budget: Budget | None = None) -> bool | None:
    """Whether `value` satisfies `schema` by the guard's validators; None when that cannot be
    told (a schema too large or unusable, the budget spent)."""
    budget = budget or Budget(BUILD_SECONDS)
    with budget.running():
        validator = _validator(schema)
        if validator is None:
            return None
        try:
            return bool(validator.is_valid(value))
        except Exception:  # a $ref that cannot be resolved, a broken pattern, the budget
            return None


def _validator(schema: Any) -> Any:
    """The schema's validator; None (built unchecked) when it is too large or too deep."""
    try:
        size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return None
    if size > MAX_SCHEMA_BYTES:
        return None
    try:
        return CACHE.get(schema).validator
    except RecursionError:  # nested deeper than jsonschema can read: built unchecked
        return None


def _matches(pattern: str, text: str) -> bool | None:
    """`search`, with None once the budget is spent."""
    try:
        return search(pattern, text)
    except BudgetSpent:
        return None


class _Builder:
    def __init__(self, root: Any, validator: Any, text: str) -> None:
        self.root = root
        self.validator = validator  # None when the schema is not valid JSON Schema
        self.text = text

    def valid(self, value: Any, schema: Any) -> bool:
        """Whether `value` satisfies `schema` (a part of the root); unjudgeable counts as yes."""
        if self.validator is None:
            return True
        try:
            return bool(self.validator.evolve(schema=schema).is_valid(value))
        except Exception:  # a $ref that cannot be resolved, a broken pattern
            return True

    def build(self, schema: Any, depth: int, variant: int) -> Any:
        if schema is True:
            return self._string({}, variant)
        if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return None
        schema = self._flatten(schema)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self._member(enum, schema, variant)
        if "if" in schema:
            return self._conditional(schema, depth, variant)
        for union in ("anyOf", "oneOf"):
            if isinstance(schema.get(union), list) and schema[union]:
                return self._alternative(schema, union, depth, variant)
        candidates = []
        for kind in self._types(schema, depth):
            value = self._typed(kind, schema, depth, variant)
            if self.valid(value, schema):
                return value
            candidates.append(value)
        if "not" in schema:
            found = [v for v in GENERIC_VALUES if self.valid(v, schema)]
            if found:
                return found[0]
        return candidates[0] if candidates else None

    # --- keywords that combine or point to other schemas ------------------------------------

    def _flatten(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        """`schema` with its `$ref`s and `allOf` parts merged in (local keywords first)."""
        out = dict(schema)
        for _ in range(_RESOLVED_CHAIN):
            if "$ref" in out:
                target = self._resolve(out.pop("$ref"))
                if isinstance(target, Mapping):
                    out = _merge(out, target)
            elif isinstance(out.get("allOf"), list):
                for part in out.pop("allOf"):
                    if isinstance(part, Mapping):
                        out = _merge(out, part)
            else:
                break
        out.pop("$dynamicRef", None)
        return out

    def _resolve(self, ref: Any) -> Any:
        """A local reference (`#`, `#/$defs/Name`, `#/definitions/Name`, an `$anchor`)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {}  # another document: nothing to read it from
        pointer = unquote(ref[1:])
        if pointer and not pointer.startswith("/"):
            return _anchor(self.root, pointer)
        node = self.root
        for token in pointer.split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return {}
        return node

    def _member(self, enum: list[Any], schema: dict[str, Any], variant: int) -> Any:
        tried = enum[:MAX_TRIES]
        valid = [v for v in tried if self.valid(v, schema)] or tried
        return valid[variant % len(valid)]

    def _alternative(self, schema: dict[str, Any], union: str, depth: int, variant: int) -> Any:
        """The first branch (merged with the keywords beside the union) that validates."""
        rest = {k: v for k, v in schema.items() if k != union}
        branches = [b for b in schema[union] if isinstance(b, Mapping) or b is True]
        deep = depth > MAX_DEPTH // 2
        branches.sort(key=lambda b: _is_null(b) != deep)  # null last, or first when deep
        first: list[Any] = []
        for branch in branches[:MAX_TRIES]:
            merged = _merge(rest, branch if isinstance(branch, Mapping) else {})
            value = self.build(merged, depth + 1, variant)
            if self.valid(value, schema):
                return value
            first = first or [value]
        return first[0] if first else None

    def _conditional(self, schema: dict[str, Any], depth: int, variant: int) -> Any:
        """if/then/else: a value built with `then`'s keywords, or `else`'s, that validates."""
        rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
        tried: list[Any] = []
        branches: tuple[Any, ...] = (schema.get("then"), schema.get("else"), {})
        for branch in branches:
            if isinstance(branch, Mapping):
                value = self.build(_merge(rest, branch), depth, variant)
                if self.valid(value, schema):
                    return value
                tried.append(value)
        return tried[0]

    def _types(self, schema: dict[str, Any], depth: int) -> list[str]:
        declared = schema.get("type")
        names = declared if isinstance(declared, list) else [declared]
        kinds = [TYPE_ALIASES.get(n, n) for n in names if isinstance(n, str)]
        kinds = [k for k in kinds if k in JSON_TYPES] or _inferred(schema)
        if len(kinds) > 1:
            deep = depth > MAX_DEPTH // 2
            kinds.sort(key=lambda k: (k == "null") != deep)
        return kinds

    # --- one type ----------------------------------------------------------------------------

    def _typed(self, kind: str, schema: dict[str, Any], depth: int, variant: int) -> Any:
        if kind == "object":
            return self._object(schema, depth, variant)
        if kind == "array":
            return self._array(schema, depth, variant)
        if kind == "integer":
            return _integer(schema, variant)
        if kind == "number":
            return _number(schema, variant)
        if kind == "boolean":
            return variant % 2 == 0
        if kind == "null":
            return None
        return self._string(schema, variant)

    def _object(self, schema: dict[str, Any], depth: int, variant: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        if isinstance(required, list):
            names = [n for n in required if isinstance(n, str)]
        else:  # nothing marked required: show every property, while shallow
            names = list(properties) if depth <= MAX_DEPTH // 2 else []
        names += _dependent(schema, names)
        wanted = min(_count(schema.get("minProperties")), MAX_ITEMS)
        names += [n for n in properties if n not in names][: max(0, wanted - len(names))]
        out: dict[str, Any] = {}
        for name in dict.fromkeys(names):
            sub = properties[name] if name in properties else self._extra(name, schema)
            out[name] = self.build(sub, depth + 1, variant)
        extra = schema.get("additionalProperties", True)
        index = 0
        while len(out) < wanted and extra is not False and index < MAX_ITEMS:
            index += 1
            key = f"key{index}"
            if key not in out:
                out[key] = self.build(self._extra(key, schema), depth + 1, variant)
        return out

    def _extra(self, name: str, schema: dict[str, Any]) -> Any:
        """The schema of a property `properties` does not list."""
        patterns = schema.get("patternProperties")
        if isinstance(patterns, Mapping):
            for pattern, sub in patterns.items():
                if _matches(str(pattern), name):
                    return sub
        extra = schema.get("additionalProperties", True)
        return extra if isinstance(extra, Mapping) else True

    def _array(self, schema: dict[str, Any], depth: int, variant: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # drafts before 2020-12: `items` as a tuple
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        contains = schema.get("contains")
        low = _count(schema.get("minItems"))
        high = schema.get("maxItems")
        high = high if isinstance(high, int) and not isinstance(high, bool) else MAX_ITEMS
        shallow = depth <= MAX_DEPTH // 2 and items is not False
        wanted = max(low, len(prefix) if shallow else 0, 1 if shallow or contains else 0)
        if contains is not None:
            wanted = max(wanted, _count(schema.get("minContains", 1)))
        wanted = min(wanted, high, MAX_ITEMS)
        if items is False:
            wanted = min(wanted, len(prefix))
        out: list[Any] = []
        for index in range(wanted):
            sub = prefix[index] if index < len(prefix) else items
            if contains is not None and isinstance(contains, Mapping):
                needed = _count(schema.get("minContains", 1))
                if index < needed:
                    sub = {"allOf": [sub, contains]} if isinstance(sub, Mapping) else contains
            out.append(self.build(sub, depth + 1, variant + index))
        if schema.get("uniqueItems") is True:
            out = _unique(out, low)
        return out

    def _string(self, schema: Mapping[str, Any], variant: int) -> str:
        fmt = schema.get("format")
        suffix = f" ({variant + 1})" if variant else ""
        value = FORMATS[fmt] if fmt in FORMATS else self.text + suffix
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and _matches(pattern, value) is False:
            made = pattern_example(pattern)
            value = made if made is not None else value
        low = min(_count(schema.get("minLength")), MAX_CHARS)
        high = schema.get("maxLength")
        if isinstance(high, int) and len(value) > high:
            keep = max(high - len(suffix), 0)
            value = (value[:keep] + suffix)[:high] if keep else value[:high]
        if len(value) < low:
            value += "x" * (low - len(value))
        return value


# --- helpers ---------------------------------------------------------------------------------


_AT_LEAST = ("minimum", "minLength", "minItems", "minProperties")
_AT_MOST = ("maximum", "maxLength", "maxItems", "maxProperties")


def _merge(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Both schemas' keywords in one (what allOf and a $ref with siblings mean), `first`'s
    winning where they cannot be combined."""
    out = dict(first)
    for key, value in second.items():
        if key not in out:
            out[key] = value
        elif key == "properties" and isinstance(value, Mapping):
            mine = out[key] if isinstance(out[key], Mapping) else {}
            both = {**value, **mine}
            for name in set(mine) & set(value):
                both[name] = {"allOf": [mine[name], value[name]]}
            out[key] = both
        elif key == "required" and isinstance(value, list) and isinstance(out[key], list):
            out[key] = list(dict.fromkeys([*out[key], *value]))
        elif key in _AT_LEAST and _num(out[key]) is not None and _num(value) is not None:
            out[key] = max(out[key], value)
        elif key in _AT_MOST and _num(out[key]) is not None and _num(value) is not None:
            out[key] = min(out[key], value)
        elif key == "type":
            out[key] = _common_type(out[key], value)
        elif key == "additionalProperties" and value is False:
            out[key] = False
    return out


def _common_type(first: Any, second: Any) -> Any:
    mine = set(first if isinstance(first, list) else [first])
    theirs = set(second if isinstance(second, list) else [second])
    if "number" in mine and "integer" in theirs:
        mine.add("integer")
    if "number" in theirs and "integer" in mine:
        theirs.add("integer")
    common = [t for t in (first if isinstance(first, list) else [first]) if t in theirs]
    return (common[0] if len(common) == 1 else common) if common else first


def _anchor(node: Any, name: str) -> Any:
    """The subschema whose `$anchor` is `name`, anywhere in `node`."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Mapping):
            if current.get("$anchor") == name:
                return current
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return {}


def _is_null(branch: Any) -> bool:
    return isinstance(branch, Mapping) and branch.get("type") == "null"


def _inferred(schema: Mapping[str, Any]) -> list[str]:
    """The type a schema without `type` describes, from its keywords; a string otherwise."""
    keywords = set(schema)
    if keywords & {"properties", "required", "additionalProperties", "patternProperties"}:
        return ["object"]
    if keywords & {"minProperties", "maxProperties", "propertyNames", "dependentRequired"}:
        return ["object"]
    if keywords & {"items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems"}:
        return ["array"]
    if keywords & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return ["number"]
    return ["string"]


def _dependent(schema: Mapping[str, Any], names: list[str]) -> list[str]:
    """Properties that `dependentRequired` (or draft 7's `dependencies`) adds to `names`."""
    rules = schema.get("dependentRequired") or schema.get("dependencies")
    if not isinstance(rules, Mapping):
        return []
    found: list[str] = []
    pending = list(names)
    while pending:
        needs = rules.get(pending.pop())
        for name in needs if isinstance(needs, list) else []:
            if isinstance(name, str) and name not in names and name not in found:
                found.append(name)
                pending.append(name)
    return found


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _unique(values: list[Any], low: int) -> list[Any]:
    """`values` without repeats, keeping at least `low` of them (then repeats stay)."""
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen if len(seen) >= low else values


def _num(value: Any) -> float | None:
    """`value` if it is a JSON number (not a boolean)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    """(low, low is exclusive, high, high is exclusive), in both the 2020-12 and draft-4 forms."""
    low, high = _num(schema.get("minimum")), _num(schema.get("maximum"))
    low_open = schema.get("exclusiveMinimum") is True
    high_open = schema.get("exclusiveMaximum") is True
    ex_low, ex_high = _num(schema.get("exclusiveMinimum")), _num(schema.get("exclusiveMaximum"))
    if ex_low is not None and (low is None or ex_low >= low):
        low, low_open = ex_low, True
    if ex_high is not None and (high is None or ex_high <= high):
        high, high_open = ex_high, True
    return low, low_open, high, high_open


def _step(schema: Mapping[str, Any]) -> float | None:
    step = _num(schema.get("multipleOf"))
    return step if step is not None and step > 0 else None


def _integer(schema: Mapping[str, Any], variant: int) -> int:
    low, low_open, high, high_open = _bounds(schema)
    least = None if low is None else math.floor(low) + 1 if low_open else math.ceil(low)
    most = None if high is None else math.ceil(high) - 1 if high_open else math.floor(high)
    value = 1 + variant
    if least is not None and value < least:
        value = least + variant
    if most is not None and value > most:
        value = most
    step = _step(schema)
    if step is not None and value % step:
        up = math.ceil(value / step) * step
        down = math.floor(value / step) * step
        value = int(up if most is None or up <= most else down)
        if value % step:  # a fractional step: 0 is a multiple of anything
            value = 0
    return value


def _number(schema: Mapping[str, Any], variant: int) -> float:
    low, low_open, high, high_open = _bounds(schema)
    value = 1.0 + variant
    if low is not None and (value < low or (low_open and value <= low)):
        value = low + (1.0 if low_open else 0.0) + variant
    if high is not None and (value > high or (high_open and value >= high)):
        value = high - (1.0 if high_open else 0.0)
        if low is not None and value <= low:
            value = (low + high) / 2
    step = _step(schema)
    if step is not None:
        up = math.ceil(value / step) * step
        value = up if high is None or up <= high else math.floor(value / step) * step
        if step.is_integer():
            value = round(value / step) * step
    return float(value)


def pattern_example(pattern: str) -> str | None:
    """A string that `pattern` matches, for the patterns a plain walk can invert (literals,
    classes, repeats, first alternatives, groups; lookarounds are only checked); None for the
    rest."""
    try:
        parsed = _parser.parse(pattern)
    except Exception:  # a pattern `re` does not know
        return None
    for at_least in (0, 1):  # each repeat at its minimum, then at least once (for lookaheads)
        try:
            made = _emit(parsed, {}, at_least)[:MAX_CHARS]
        except Exception:  # conditionals, classes no simple character fits
            return None
        if _matches(pattern, made):
            return made
    return None


_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": " ",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
}


def _emit(items: Any, groups: dict[int, str], at_least: int) -> str:
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name in ("NOT_LITERAL", "ANY"):
            out.append("b" if name == "NOT_LITERAL" and arg == ord("a") else "a")
        elif name == "IN":
            out.append(_member_of(arg))
        elif name == "CATEGORY":
            out.append(_CATEGORY_CHARS[str(arg)])
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            least, most, sub = arg
            count = min(max(least, min(at_least, most)), MAX_CHARS)
            out.append(_emit(sub, groups, at_least) * count)
        elif name == "SUBPATTERN":
            group, _, _, sub = arg
            text = _emit(sub, groups, at_least)
            if group is not None:
                groups[group] = text
            out.append(text)
        elif name == "ATOMIC_GROUP":
            out.append(_emit(arg, groups, at_least))
        elif name == "BRANCH":
            out.append(_emit(arg[1][0], groups, at_least))
        elif name == "GROUPREF":
            out.append(groups[arg])
        elif name not in ("AT", "ASSERT", "ASSERT_NOT"):  # anchors, lookarounds: checked after
            raise ValueError(f"cannot invert {name}")
    return "".join(out)


def _member_of(members: Any) -> str:
    """A character of a class such as `[a-z0-9_]` or `[^,]`."""
    negated = bool(members) and str(members[0][0]) == "NEGATE"
    if negated:
        members = members[1:]
    for char in "a0A _-.x@/:":
        if _in_class(char, members) != negated:
            return char
    raise ValueError("no simple character fits the class")


_CATEGORY_TESTS = {
    "CATEGORY_DIGIT": re.compile(r"\d"),
    "CATEGORY_WORD": re.compile(r"\w"),
    "CATEGORY_SPACE": re.compile(r"\s"),
}


def _in_class(char: str, members: Any) -> bool:
    for op, arg in members:
        kind = str(op)
        if kind == "RANGE" and arg[0] <= ord(char) <= arg[1]:
            return True
        if kind == "LITERAL" and ord(char) == arg:
            return True
        if kind == "CATEGORY":
            name = str(arg).replace("_NOT_", "_")
            matched = _CATEGORY_TESTS[name].match(char) is not None
            if matched != ("_NOT_" in str(arg)):
                return True
    return False
