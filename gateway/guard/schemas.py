"""Compiled JSON Schema validators for tool parameters, cached across requests.

Tool schemas come from clients, so their `pattern`s are untrusted: a pattern that backtracks
catastrophically would hold the event loop (and every tenant) for minutes under Python's `re`.
Patterns are matched with the `regex` engine and a time limit instead; an argument that cannot
be checked in time is a problem, like one that does not match.

A match is bounded twice: by PATTERN_SECONDS, and by the request's `Budget`, the total time
all of its validation may take (every keyword checks it, so a wide `anyOf` or a long list of
strings is bounded as well as one slow pattern). A spent budget raises `BudgetSpent`: the caller
stops checking and says so (guard/tools.py).

Clients send the same `tools` with every request of a conversation, so a validator is built once
per distinct schema (keyed by a hash of its canonical JSON) and kept in a bounded cache,
partitioned by owner (the tenant): when it is full, the entry that goes is the least recently
used one of the owner holding the most bytes, so one tenant's flood of distinct schemas evicts
its own entries and never another tenant's. A schema that is not valid JSON Schema is the
client's mistake, not the model's: it is compiled to an "unusable" entry that says why, and
calls to that tool are then not validated against it.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
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


class BudgetSpent(Exception):
    """The validation time of the request is used up: the check in progress stops."""


class Budget:
    """The time all validation of one request may take, summed over its checks (a repair's
    check spends from the same budget). Used by one thread at a time; `running` makes it the
    budget of the code it wraps, in the thread that runs it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self._since: float | None = None

    def left(self) -> float:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return self.seconds - self.spent - running

    @property
    def exhausted(self) -> bool:
        return self.left() <= 0

    def check(self) -> None:
        if self.left() <= 0:
            raise BudgetSpent(f"the validation budget of {self.seconds * 1000:.0f} ms is spent")

    @contextmanager
    def running(self) -> Iterator[Budget]:
        if self._since is not None:  # already running (a check inside a check)
            yield self
            return
        token = _CURRENT.set(self)
        self._since = time.perf_counter()
        try:
            yield self
        finally:
            self.spent += time.perf_counter() - self._since
            self._since = None
            _CURRENT.reset(token)


_CURRENT: ContextVar[Budget | None] = ContextVar("validation_budget", default=None)


def search(pattern: str, text: str) -> bool | None:
    """Whether `pattern` matches somewhere in `text`; None when it could not tell in time.
    Raises BudgetSpent when the running budget ends before the match does."""
    budget = _CURRENT.get()
    timeout = PATTERN_SECONDS
    if budget is not None:
        budget.check()
        timeout = min(timeout, budget.left())
    try:
        return regex.search(pattern, text, timeout=timeout) is not None
    except TimeoutError:
        if budget is not None:
            budget.check()
        return None
    except regex.error:  # a construct only `re` knows: it has no time limit, so not run
        return None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    found = search(pattern, instance)
    if found is None:
        yield ValidationError(
            f"{instance!r:.80} could not be checked against {pattern!r} in time "
            "(too slow, or a construct the time-limited engine does not run)"
        )
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


Keyword = Callable[[Any, Any, Any, Any], Any]


def _budgeted(keyword: Keyword) -> Keyword:
    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _CURRENT.get()
        if budget is not None:
            budget.check()
        return keyword(validator, value, instance, schema)

    return checked


_SAFE: dict[type, type] = {}


def _safe(cls: type) -> type:
    """The validator class with time-limited `pattern` and `patternProperties`, and every
    keyword checking the running budget first."""
    safe = _SAFE.get(cls)
    if safe is None:
        keywords: dict[str, Keyword] = dict(cls.VALIDATORS)  # type: ignore[attr-defined]
        keywords.update(pattern=_pattern, patternProperties=_pattern_properties)
        changes = {name: _budgeted(keyword) for name, keyword in keywords.items()}
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
        except BudgetSpent:
            raise
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
    keyed = _keyed(schema)
    return None if keyed is None else keyed[0]


def _keyed(schema: Any) -> tuple[str, int] | None:
    """(the key, the canonical JSON's length: the entry's weight), or None."""
    try:
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    encoded = canonical.encode()
    return hashlib.blake2b(encoded, digest_size=16).hexdigest(), len(encoded)


class _Partition:
    """One owner's entries, least recently used first, and the bytes they weigh."""

    __slots__ = ("entries", "weight")

    def __init__(self) -> None:
        self.entries: OrderedDict[str, tuple[CompiledSchema, int]] = OrderedDict()
        self.weight = 0

    def evict(self) -> None:
        _, (_, weight) = self.entries.popitem(last=False)
        self.weight -= weight


class ValidatorCache:
    """Compiled schemas, bounded in entries and in bytes (of the schemas' JSON), partitioned by
    owner. An owner holds at most `owner_entries` entries and `owner_bytes` bytes (its own least
    recently used go first); when the whole cache is over `max_entries` or `max_bytes`, the
    least recently used entry of the heaviest owner goes, so an owner within its fair share
    never loses an entry to another's flood. A schema heavier than `owner_bytes` is compiled
    and not kept. Safe to share between threads."""

    def __init__(
        self,
        max_entries: int = 1024,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        owner_entries: int | None = None,
        owner_bytes: int | None = None,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be at least 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.owner_entries = owner_entries or max_entries
        self.owner_bytes = owner_bytes or max_bytes
        self.hits = 0
        self.misses = 0
        self._owners: dict[str | None, _Partition] = {}
        self._entries = 0
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, schema: Any, owner: str | None = None) -> CompiledSchema:
        keyed = _keyed(schema)
        if keyed is None:
            self.misses += 1
            return compile_schema(schema)
        key, weight = keyed
        with self._lock:
            partition = self._owners.get(owner)
            found = partition.entries.get(key) if partition is not None else None
            if found is not None:
                assert partition is not None
                partition.entries.move_to_end(key)
                self.hits += 1
                return found[0]
        compiled = compile_schema(schema)  # outside the lock: compiling can take milliseconds
        with self._lock:
            self.misses += 1
            if weight <= self.owner_bytes:
                self._keep(owner, key, compiled, weight)
        return compiled

    def _keep(self, owner: str | None, key: str, compiled: CompiledSchema, weight: int) -> None:
        partition = self._owners.setdefault(owner, _Partition())
        old = partition.entries.pop(key, None)
        if old is not None:  # compiled twice at once: keep the newer
            partition.weight -= old[1]
            self._entries -= 1
            self._weight -= old[1]
        partition.entries[key] = (compiled, weight)
        partition.weight += weight
        self._entries += 1
        self._weight += weight
        while len(partition.entries) > self.owner_entries or partition.weight > self.owner_bytes:
            self._evict(partition)
        while self._entries > self.max_entries or self._weight > self.max_bytes:
            heaviest = max(self._owners.values(), key=lambda p: (p.weight, len(p.entries)))
            self._evict(heaviest)
        for name in [name for name, p in self._owners.items() if not p.entries]:
            del self._owners[name]

    def _evict(self, partition: _Partition) -> None:
        before = partition.weight
        partition.evict()
        self._entries -= 1
        self._weight -= before - partition.weight

    def owned(self, owner: str | None) -> int:
        """How many entries `owner` holds."""
        with self._lock:
            partition = self._owners.get(owner)
            return len(partition.entries) if partition is not None else 0

    def __len__(self) -> int:
        return self._entries

    def clear(self) -> None:
        with self._lock:
            self._owners.clear()
            self._entries = self._weight = 0
            self.hits = self.misses = 0


# Per tenant: a quarter of the entries and 8 MiB of schemas, so four tenants at their cap fill it.
DEFAULT_CACHE = ValidatorCache(
    1024, max_bytes=32 * 1024 * 1024, owner_entries=256, owner_bytes=8 * 1024 * 1024
)
