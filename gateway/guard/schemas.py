"""Compiled JSON Schema validators for tool parameters, cached across requests.

Tool schemas come from clients, so their `pattern`s are untrusted: a pattern that backtracks
catastrophically would hold the event loop (and every tenant) for minutes under Python's `re`.
Patterns are matched with the `regex` engine and a time limit instead; an argument that cannot
be checked in time is a problem, like one that does not match.

Clients send the same `tools` with every request of a conversation, so a validator is built once
per distinct schema (keyed by a hash of its canonical JSON) and kept in a bounded LRU. A schema
that is not valid JSON Schema is the client's mistake, not the model's: it is compiled to an
"unusable" entry that says why, and calls to that tool are then not validated against it.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import regex
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.validators import extend, validator_for

from gateway.guard.dates import is_date, is_date_time
from gateway.guard.problems import json_path

MAX_ERRORS = 20
_LINE_CHARS = 300
_FORMAT_HINTS = {
    "date": "expected YYYY-MM-DD",
    "date-time": "expected RFC 3339 with an offset, e.g. 2024-01-31T09:30:00Z",
}
# Formats checked with jsonschema's own stdlib-only checkers; formats needing optional packages
# (uri, hostname...) are not checked, so results do not depend on what happens to be installed.
_STDLIB_FORMATS = ("email", "idn-email", "ipv4", "ipv6", "uuid")


PATTERN_SECONDS = 0.05  # per match; a sane pattern on tool arguments takes microseconds


def search(pattern: str, text: str) -> bool | None:
    """Whether `pattern` matches somewhere in `text`; None when it could not tell in time."""
    try:
        return regex.search(pattern, text, timeout=PATTERN_SECONDS) is not None
    except TimeoutError:
        return None
    except regex.error:  # a construct only `re` knows: schemas were checked with it
        return re.search(pattern, text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    found = search(pattern, instance)
    if found is None:
        yield ValidationError(f"{instance!r:.80} could not be checked against {pattern!r} in time")
    elif not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):  # a key that cannot be checked in time matches nothing
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_SAFE: dict[type, type] = {}


def _safe(cls: type) -> type:
    """The validator class with time-limited `pattern` and `patternProperties`."""
    safe = _SAFE.get(cls)
    if safe is None:
        changes = {"pattern": _pattern, "patternProperties": _pattern_properties}
        safe = _SAFE[cls] = extend(cls, changes)
    return safe


class UnusableSchema(Exception):
    """The tool's schema cannot judge arguments (invalid, or a `$ref` that cannot be resolved)."""


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checks("date")(lambda value: not isinstance(value, str) or is_date(value))
    checker.checks("date-time")(lambda value: not isinstance(value, str) or is_date_time(value))
    known = Draft202012Validator.FORMAT_CHECKER.checkers
    for name in _STDLIB_FORMATS:
        if name in known:
            func, raises = known[name]
            checker.checks(name, raises=raises)(func)
    return checker


FORMAT_CHECKER = _format_checker()


@dataclass(frozen=True, slots=True, eq=False)
class CompiledSchema:
    schema: Any
    validator: Any  # a jsonschema Validator, or None when `unusable` says why
    unusable: str | None = None

    def errors(self, instance: Any) -> list[str]:
        """One line per error, `$.path: message`, at most MAX_ERRORS (then a count)."""
        if self.validator is None:
            raise UnusableSchema(self.unusable or "unusable schema")
        try:
            found = list(self.validator.iter_errors(instance))
        except Exception as exc:  # a schema that passed the meta-schema can still fail here
            raise UnusableSchema(f"{type(exc).__name__}: {exc}") from exc
        lines: list[str] = []
        for error in sorted(found, key=lambda e: (json_path(e.absolute_path), e.message)):
            lines.extend(describe(error))
        if len(lines) > MAX_ERRORS:
            lines = [*lines[:MAX_ERRORS], f"... and {len(lines) - MAX_ERRORS} more errors"]
        return lines


def compile_schema(schema: Any) -> CompiledSchema:
    """A validator for `schema` (draft 2020-12 unless `$schema` names another draft)."""
    if not isinstance(schema, Mapping | bool):
        return CompiledSchema(schema, None, f"parameters must be an object, not {schema!r:.60}")
    schema = copy.deepcopy(schema)  # the cache outlives the request body it came from
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = json_path(exc.absolute_path)
        return CompiledSchema(schema, None, f"not a valid JSON Schema at {where}: {exc.message}")
    return CompiledSchema(schema, _safe(cls)(schema, format_checker=FORMAT_CHECKER))


def describe(error: ValidationError) -> list[str]:
    """`error` worded for the model: jsonschema's message, with the JSON path in front, one line
    per unexpected property, and a hint for formats and unmatched alternatives."""
    path = json_path(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        return _additional(path, error)
    message = error.message
    if error.validator == "format" and error.validator_value in _FORMAT_HINTS:
        message = f"{message} ({_FORMAT_HINTS[error.validator_value]})"
    elif error.validator in ("anyOf", "oneOf") and error.context:
        closest = best_match(error.context)
        message = f"{message}; closest alternative: {json_path(closest.absolute_path)}: "
        message += closest.message
    return [_cut(f"{path}: {message}")]


def _additional(path: str, error: ValidationError) -> list[str]:
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        properties = {}
    patterns = schema.get("patternProperties")
    patterns = list(patterns) if isinstance(patterns, Mapping) else []
    instance = error.instance if isinstance(error.instance, Mapping) else {}
    extras = [
        key
        for key in instance
        if key not in properties and not any(search(p, key) for p in patterns)
    ]
    missing = [name for name in properties if name not in instance]
    lines = []
    for key in extras:
        line = f"{path}: additional property {key!r} is not allowed"
        close = difflib.get_close_matches(key, missing, n=1, cutoff=0.6)
        if close:
            line += f" (did you mean {close[0]!r}?)"
        elif properties:
            line += f" (properties: {', '.join(properties)})"
        lines.append(_cut(line))
    return lines or [_cut(f"{path}: {error.message}")]


def _cut(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 3] + "..."


def schema_key(schema: Any) -> str | None:
    """A hash of the schema's canonical JSON; None when it is not JSON (then it is not cached)."""
    try:
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


class ValidatorCache:
    """A bounded LRU of compiled schemas. Safe to share between threads."""

    def __init__(self, max_entries: int = 1024) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, CompiledSchema] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, schema: Any) -> CompiledSchema:
        key = schema_key(schema)
        if key is None:
            self.misses += 1
            return compile_schema(schema)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
        compiled = compile_schema(schema)  # outside the lock: compiling can take milliseconds
        with self._lock:
            self.misses += 1
            self._entries[key] = compiled
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return compiled

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


DEFAULT_CACHE = ValidatorCache()
