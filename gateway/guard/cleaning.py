"""Deterministic cleaning of tool-call arguments before they are judged.

Models often send the right value in the wrong JSON type ("12.5" for a number, "true" for a
boolean), a date in a human spelling, or an enum value in the wrong case ("celsius" for
"Celsius"). Where the tool's schema says which type or format it
wants, and the value has exactly one reading in it, the value is rewritten; everything else is
left for validation to report. Nothing is invented and nothing is dropped.

Deliberate limits:
- strings are trimmed only where the schema constrains their form (enum, const, format,
  pattern) or before they become numbers, booleans or dates: surrounding whitespace can be
  content (a file body's final newline);
- `anyOf`/`oneOf` are followed only when the choice is clear: one alternative takes the value
  as it is, or every alternative that can convert it gives the same result;
- `$ref` is followed only within the schema (`#/...`), and `allOf` only with one member;
- an enum (or const) value is recased only when exactly one allowed string equals it ignoring
  case: `["Celsius", "celsius"]` leaves "CELSIUS" alone.

Every change is a `Change`: its line for the logs, and its reason for the metrics.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import unquote

from gateway.guard.dates import is_date, is_date_time, normalize_date, normalize_date_time
from gateway.guard.problems import PathPart, argument_path, show

Schema = Mapping[str, Any]

_INTEGER = re.compile(r"[+-]?\d+(?:\.0*)?")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_FORM_KEYWORDS = ("enum", "const", "format", "pattern")
_MAX_REF_HOPS = 16
_NO = object()  # "no conversion", distinct from every JSON value including None

CleaningReason = Literal[
    "type", "trim", "date", "enum_case", "empty_arguments", "renamed", "undeclared_stripped"
]
"""Why an argument was changed: converted to the type the schema names (`type`), trimmed where
the schema constrains the form (`trim`), a date made ISO (`date`), an enum value recased
(`enum_case`), empty `arguments` made `{}`, an undeclared name renamed to the declared one it
misspells only in case or separators (`renamed`), an undeclared parameter dropped by policy
(`undeclared_stripped`)."""


class Change(str):
    """One line saying what cleaning changed (`amount: '12.5' -> 12.5`), and why."""

    reason: CleaningReason

    def __new__(cls, text: str, reason: CleaningReason) -> Change:
        change = super().__new__(cls, text)
        change.reason = reason
        return change


def clean_arguments(value: Any, schema: Any) -> tuple[Any, list[Change]]:
    """`value` cleaned against `schema`, and one line per change ("amount: '12.5' -> 12.5").

    The input is never mutated; containers are copied only along changed paths, and an
    unchanged value is returned as the very same object.
    """
    changes: list[Change] = []
    root = schema if isinstance(schema, Mapping) else {}
    return _Cleaner(root).clean(value, schema, (), changes), changes


class _Cleaner:
    def __init__(self, root: Schema) -> None:
        self._root = root

    def clean(
        self, value: Any, schema: Any, path: tuple[PathPart, ...], changes: list[Change]
    ) -> Any:
        resolved = self._resolve(schema)
        if resolved is None:
            return value
        branches = resolved.get("anyOf", resolved.get("oneOf"))
        if isinstance(branches, list) and branches:
            value = self._clean_branches(value, branches, path, changes)
        types = declared_types(resolved)
        if isinstance(value, str):
            return self._clean_string(value, resolved, types, path, changes)
        if isinstance(value, dict) and _accepts(types, value):
            return self._clean_object(value, resolved, path, changes)
        if isinstance(value, list) and _accepts(types, value):
            return self._clean_array(value, resolved, path, changes)
        return value

    def _clean_string(
        self,
        value: str,
        schema: Schema,
        types: frozenset[str] | None,
        path: tuple[PathPart, ...],
        changes: list[Change],
    ) -> Any:
        if types is None or "string" in types:
            new, reason = _string_form(value, schema)
            if new == value:
                return value
            changes.append(Change(f"{argument_path(path)}: {show(value)} -> {show(new)}", reason))
            return new
        results = [r for r in (_convert(value, t) for t in sorted(types)) if r is not _NO]
        if not results or any(not json_equal(r, results[0]) for r in results[1:]):
            return value
        converted = results[0]
        line = f"{argument_path(path)}: {show(value)} -> {show(converted)}"
        changes.append(Change(line, "type"))
        if isinstance(converted, dict | list):  # JSON sent as a string: clean its members too
            return self.clean(converted, schema, path, changes)
        return converted

    def _clean_branches(
        self, value: Any, branches: list[Any], path: tuple[PathPart, ...], changes: list[Change]
    ) -> Any:
        resolved = [self._resolve(branch) for branch in branches]
        known = [branch for branch in resolved if branch is not None]
        if len(known) != len(resolved):
            return value  # an alternative we cannot read: we cannot know the choice is clear
        taking = [branch for branch in known if _accepts(declared_types(branch), value)]
        if len(taking) == 1:
            return self.clean(value, taking[0], path, changes)
        if taking:
            return value  # several alternatives take it as it is: no reason to change it
        outcomes: list[tuple[Any, list[Change]]] = []
        for branch in known:
            trial: list[Change] = []
            new = self.clean(value, branch, path, trial)
            if trial:
                outcomes.append((new, trial))
        if not outcomes or any(not json_equal(new, outcomes[0][0]) for new, _ in outcomes[1:]):
            return value
        changes.extend(outcomes[0][1])
        return outcomes[0][0]

    def _clean_object(
        self,
        value: dict[str, Any],
        schema: Schema,
        path: tuple[PathPart, ...],
        changes: list[Change],
    ) -> dict[str, Any]:
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            properties = {}
        extra = schema.get("additionalProperties")
        out: dict[str, Any] | None = None
        for key, item in value.items():
            sub = properties.get(key, extra)
            if not isinstance(sub, Mapping):
                continue
            new = self.clean(item, sub, (*path, key), changes)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out

    def _clean_array(
        self, value: list[Any], schema: Schema, path: tuple[PathPart, ...], changes: list[Change]
    ) -> list[Any]:
        def clean(item: Any, sub: Any, index: int) -> Any:
            if not isinstance(sub, Mapping):
                return item
            return self.clean(item, sub, (*path, index), changes)

        return map_items(value, schema, clean)

    def _resolve(self, schema: Any) -> Schema | None:
        return resolve_local(schema, self._root)


def resolve_local(schema: Any, root: Schema) -> Schema | None:
    """The schema behind local `$ref`s and one-member `allOf`s; None when unreadable."""
    for _ in range(_MAX_REF_HOPS):
        if schema is True:
            return {}
        if not isinstance(schema, Mapping):
            return None
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = _pointer(ref, root)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, Mapping) and rest else target
            continue
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            schema = {**all_of[0], **rest}
            continue
        return schema
    return None


def _pointer(ref: str, root: Schema) -> Any:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for raw in ref[1:].split("/")[1:]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _string_form(value: str, schema: Schema) -> tuple[str, CleaningReason]:
    text = value.strip() if any(k in schema for k in _FORM_KEYWORDS) else value
    form = schema.get("format")
    if form == "date" and not is_date(text):
        normalized = normalize_date(text)
        return (normalized, "date") if normalized else (text, "trim")
    if form == "date-time" and not is_date_time(text):
        normalized = normalize_date_time(text)
        return (normalized, "date") if normalized else (text, "trim")
    recased = _recased(text, schema)
    return (recased, "enum_case") if recased is not None else (text, "trim")


def _recased(text: str, schema: Schema) -> str | None:
    """The one allowed string equal to `text` ignoring case, when `text` itself is not allowed
    (None when none or several are: "celsius" for ["Celsius", "Fahrenheit"] only)."""
    allowed = schema.get("enum")
    if not isinstance(allowed, list):
        allowed = [schema["const"]] if "const" in schema else None
    if allowed is None or any(v == text for v in allowed if isinstance(v, str)):
        return None
    folded = text.casefold()
    matches = {v for v in allowed if isinstance(v, str) and v.casefold() == folded}
    return matches.pop() if len(matches) == 1 else None


def _convert(value: str, json_type: str) -> Any:
    text = value.strip()
    if json_type == "integer" and _INTEGER.fullmatch(text):
        return int(text.split(".")[0])
    if json_type == "number" and _NUMBER.fullmatch(text):
        if _INTEGER.fullmatch(text) and "." not in text:
            return int(text)
        number = float(text)
        return number if math.isfinite(number) else _NO
    if json_type == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if json_type in ("array", "object") and text[:1] in ("[", "{"):
        try:
            decoded = strict_loads(text)
        except ValueError:
            return _NO
        wanted = list if json_type == "array" else dict
        return decoded if isinstance(decoded, wanted) else _NO
    return _NO


def strict_loads(text: str) -> Any:
    """JSON as the standard has it: Python's json also reads NaN and Infinity, and turns 1e400
    into infinity; none of them is JSON, and no tool's client could parse them back."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):  # 1e400: would be re-serialized as Infinity
        raise ValueError(f"the number {literal} is out of range")
    return number


def declared_types(schema: Schema) -> frozenset[str] | None:
    """The JSON types a schema's `type` names; None when it names none (any type)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset((declared,))
    if isinstance(declared, list):
        return frozenset(t for t in declared if isinstance(t, str))
    return None


def _json_types(value: Any) -> frozenset[str]:
    if isinstance(value, bool):
        return frozenset(("boolean",))
    if isinstance(value, int):
        return frozenset(("integer", "number"))
    if isinstance(value, float):
        return frozenset(("integer", "number")) if value.is_integer() else frozenset(("number",))
    if isinstance(value, str):
        return frozenset(("string",))
    if isinstance(value, list):
        return frozenset(("array",))
    if isinstance(value, dict):
        return frozenset(("object",))
    return frozenset(("null",)) if value is None else frozenset()


def _accepts(types: frozenset[str] | None, value: Any) -> bool:
    return types is None or not types.isdisjoint(_json_types(value))


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 12 and 12.0 are the same number, true and 1 are not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def map_items(
    value: list[Any], schema: Schema, rebuild: Callable[[Any, Any, int], Any]
) -> list[Any]:
    """`value` with each item replaced by `rebuild(item, its schema, index)`, copied only when
    one changes (the same list otherwise); an item the schema says nothing of stays as it is.
    An item's schema is its `prefixItems` entry, else `items` (drafts before 2020-12: `items`
    as a list is the tuple, `additionalItems` the rest)."""
    prefix, items = schema.get("prefixItems"), schema.get("items")
    if isinstance(items, list):
        prefix, items = items, schema.get("additionalItems")
    if not isinstance(prefix, list):
        prefix = []
    out: list[Any] | None = None
    for index, item in enumerate(value):
        sub = prefix[index] if index < len(prefix) else items
        if sub is None:
            continue
        new = rebuild(item, sub, index)
        if new is not item:
            if out is None:
                out = list(value)
            out[index] = new
    return value if out is None else out
