"""Business rules from policy: narrower than a tool's schema, and hooks for what no schema says.

An `ArgumentRule` names its argument by a dotted path (`amount`, `address.country`); a list on
the way, or at the end, applies the rule to each element (`items.sku` checks every item's sku;
`[]` may be written for clarity: `items[].sku`). An absent argument is not checked: whether it
must be there is the schema's business.

A hook (`package.module:function`) is imported once and called with (tool name, a copy of the
arguments); it returns a list of problems. A hook that cannot be loaded, raises or returns
something else is a `policy_error`, never an exception out of the gateway.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from gateway.config.guard import ArgumentRule, ToolRule
from gateway.guard.cleaning import json_equal
from gateway.guard.dates import earliest_today, parse_date, parse_date_time
from gateway.guard.problems import PathPart, Problem, ProblemKind, json_path, show

Hook = Callable[[str, Any], Any]

_hooks: dict[str, Hook | str] = {}  # spec -> the function, or why it could not be loaded
_hooks_lock = threading.Lock()


class HookError(Exception):
    pass


def load_hook(spec: str) -> Hook:
    """The function `spec` names, imported once; HookError says why it cannot be used. Worth
    calling when the config loads, so a typo fails at startup rather than per request."""
    with _hooks_lock:
        found = _hooks.get(spec)
        if found is None:
            found = _import(spec)
            _hooks[spec] = found
    if isinstance(found, str):
        raise HookError(found)
    return found


def _import(spec: str) -> Hook | str:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raises
        return f"hook {spec!r} cannot be loaded: {type(exc).__name__}: {exc}"
    if not callable(target):
        return f"hook {spec!r} is not callable"
    if inspect.iscoroutinefunction(target):
        return f"hook {spec!r} is a coroutine function; hooks must be plain functions"
    return target  # type: ignore[no-any-return]


def run_hook(spec: str, tool: str, arguments: Any) -> list[Problem]:
    try:
        hook = load_hook(spec)
    except HookError as exc:
        return [Problem("policy_error", tool, str(exc))]
    try:
        result = hook(tool, copy.deepcopy(arguments))
    except Exception as exc:
        return [Problem("policy_error", tool, f"hook {spec!r} raised {type(exc).__name__}: {exc}")]
    if result is None:
        return []
    if isinstance(result, str):
        result = [result]
    if not isinstance(result, list | tuple) or not all(isinstance(r, str) for r in result):
        message = f"hook {spec!r} returned {show(result)}; expected a list of strings"
        return [Problem("policy_error", tool, message)]
    return [Problem("rule", tool, message) for message in result]


def check_rules(
    tool: str, rule: ToolRule, arguments: Any, *, now: datetime, judge_types: bool = True
) -> list[Problem]:
    """Problems with `arguments` under the rule's argument rules. With `judge_types` False (the
    schema has already complained), values of a type a rule cannot judge are skipped rather
    than reported a second time."""
    problems: list[Problem] = []
    for arg_path, arg_rule in rule.arguments.items():
        for path, value in _values_at(arguments, _split(arg_path), ()):
            for fault, message in _judge(value, arg_rule, now, judge_types):
                kind: ProblemKind = "rule" if fault else "policy_error"
                problems.append(Problem(kind, tool, f"{json_path(path)}: {message}"))
    return problems


def _split(arg_path: str) -> list[str]:
    return [part.removesuffix("[]") for part in arg_path.split(".") if part]


def _values_at(
    node: Any, parts: list[str], path: tuple[PathPart, ...]
) -> Iterator[tuple[tuple[PathPart, ...], Any]]:
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _values_at(item, parts, (*path, index))
        return
    if not parts:
        yield path, node
        return
    if isinstance(node, dict) and parts[0] in node:
        yield from _values_at(node[parts[0]], parts[1:], (*path, parts[0]))


def _judge(
    value: Any, rule: ArgumentRule, now: datetime, judge_types: bool
) -> Iterator[tuple[bool, str]]:
    """(model's fault?, message) for each way `value` breaks `rule`."""
    if rule.enum is not None and not any(json_equal(value, allowed) for allowed in rule.enum):
        yield True, f"{show(value)} is not one of {show(rule.enum)} (allowed by policy)"
    if rule.pattern is not None:
        if isinstance(value, str):
            try:
                matched = re.search(rule.pattern, value) is not None
            except re.error as exc:
                yield False, f"the policy's pattern {rule.pattern!r} is invalid: {exc}"
            else:
                if not matched:
                    yield (
                        True,
                        f"{show(value)} does not match the policy's pattern {rule.pattern!r}",
                    )
        elif judge_types:
            yield True, f"{show(value)} is not a string (the policy requires one)"
    if rule.minimum is not None or rule.maximum is not None:
        if _is_number(value):
            if rule.minimum is not None and value < rule.minimum:
                yield True, f"{show(value)} is less than the minimum of {_num(rule.minimum)}"
            if rule.maximum is not None and value > rule.maximum:
                yield True, f"{show(value)} is greater than the maximum of {_num(rule.maximum)}"
        elif judge_types:
            yield True, f"{show(value)} is not a number (the policy requires one)"
    if rule.not_in_past:
        yield from _judge_not_in_past(value, now, judge_types)


def _judge_not_in_past(value: Any, now: datetime, judge_types: bool) -> Iterator[tuple[bool, str]]:
    day = parse_date(value) if isinstance(value, str) else None
    moment = parse_date_time(value) if isinstance(value, str) and day is None else None
    # "Today" is taken in the earliest time zone on Earth, so a user's local today never counts
    # as past wherever they are; an exact instant is compared as it is.
    if day is not None and day < earliest_today(now):
        yield True, f"{show(value)} is in the past (today is {now.date().isoformat()} UTC)"
    elif moment is not None and moment < now:
        yield True, f"{show(value)} is in the past (now is {now.isoformat(timespec='seconds')})"
    elif day is None and moment is None and judge_types:
        yield True, f"{show(value)} is not a date (YYYY-MM-DD) or an RFC 3339 date-time"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _num(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)
