"""Validation of a model's tool calls against the tools its request declared.

A `ToolCatalog` is built per request from the request's `tools` and checks one OpenAI tool call
at a time. A tool's schema is compiled when a call to it is first checked (a request that
declares many tools and calls one pays for one), by a cache shared across requests and
partitioned by tenant; all the checks of a request spend from one time budget, and a call
checked after it is spent comes back `unchecked`, with a warning that says so. A call's name
must be declared, its `arguments` must be a JSON object that satisfies the tool's schema once
cleaned and takes only the parameters it declares (guard/undeclared.py, by policy), and the
policy's rules and hook must accept it. `check_tool_choice` holds the answer as a whole to the
request's `tool_choice`. Nothing here does I/O; what to do about the problems (repair, strip,
fail) is the caller's decision.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.config.guard import ToolRule, UndeclaredPolicy
from gateway.guard.cleaning import Change, clean_arguments, strict_loads
from gateway.guard.problems import Problem, json_path, show
from gateway.guard.rules import check_rules, run_hook
from gateway.guard.schemas import (
    DEFAULT_CACHE,
    Budget,
    BudgetSpent,
    CompiledSchema,
    UnusableSchema,
    ValidatorCache,
)
from gateway.guard.undeclared import Undeclared, review_parameters
from gateway.util.jsondepth import too_deep

ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
MAX_ARGUMENT_DEPTH = 64  # tool arguments deeper than this are not a real tool's input
_LISTED_NAMES = 30
DEFAULT_UNDECLARED: UndeclaredPolicy = "repair"  # as ToolGuardConfig's default


class Tool:
    """A declared function tool; its schema compiled on first use."""

    __slots__ = ("_cache", "_owner", "_schema", "name", "parameters", "rule")

    def __init__(
        self,
        name: str,
        parameters: Any,
        rule: ToolRule | None = None,
        *,
        cache: ValidatorCache = DEFAULT_CACHE,
        owner: str | None = None,
    ) -> None:
        self.name = name
        self.parameters = parameters
        self.rule = rule
        self._cache = cache
        self._owner = owner
        self._schema: CompiledSchema | None = None

    @property
    def compiled(self) -> bool:
        return self._schema is not None

    @property
    def schema(self) -> CompiledSchema:
        if self._schema is None:
            self._schema = self._cache.get(self.parameters, self._owner)
        return self._schema


@dataclass(frozen=True, slots=True)
class CheckedCall:
    call: Mapping[str, Any]
    """The call to send on: the original, or a copy whose arguments are the cleaned ones
    re-serialized compactly (only when cleaning changed something)."""
    problems: tuple[Problem, ...] = ()
    changes: tuple[Change, ...] = ()
    """What cleaning (and the undeclared-parameter policy) changed, one line each
    ("amount: '12.5' -> 12.5"), each with its reason."""
    arguments: Any = None
    """The parsed (and cleaned) arguments; None when they are not JSON."""
    warnings: tuple[str, ...] = ()
    """Why part of the check was skipped (the client's schema is unusable): for logs."""
    unchecked: bool = False
    """The request's validation budget ran out before this call was judged: nothing is known
    about it (`problems` is empty, `call` is the original)."""

    @property
    def ok(self) -> bool:
        return not self.problems


class ToolCatalog:
    def __init__(
        self,
        tools: Mapping[str, Tool],
        *,
        clean: bool = True,
        undeclared: UndeclaredPolicy = DEFAULT_UNDECLARED,
        warnings: Sequence[str] = (),
        now: Callable[[], datetime] | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.tools = tools
        self.clean = clean
        self.undeclared = undeclared
        self.budget = budget
        self._warnings = tuple(warnings)
        self._now = now or (lambda: datetime.now(UTC))

    @property
    def warnings(self) -> tuple[str, ...]:
        """Problems with the request's `tools` themselves (duplicates, and the unusable schemas
        of the tools compiled so far)."""
        unusable = [
            f"tool {tool.name!r}: parameters {tool.schema.unusable}"
            for tool in self.tools.values()
            if tool.compiled and tool.schema.unusable
        ]
        return (*self._warnings, *unusable)

    @classmethod
    def from_request(
        cls,
        tools: Sequence[Any] | None,
        rules: Mapping[str, ToolRule],
        clean: bool,
        *,
        undeclared: UndeclaredPolicy = DEFAULT_UNDECLARED,
        cache: ValidatorCache = DEFAULT_CACHE,
        owner: str | None = None,
        budget: Budget | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> ToolCatalog:
        """The catalog of a request's function tools. Other tool types are not validated;
        a tool without `parameters` takes any object. `owner` (the tenant) is the partition of
        the cache its schemas are kept in; `budget` bounds the time of all its checks."""
        found: dict[str, Tool] = {}
        warnings: list[str] = []
        for entry in tools or ():
            function = _function_of(entry)
            if function is None:
                continue
            name = function.get("name")
            if not isinstance(name, str) or not name:
                warnings.append(f"a function tool without a name: {show(entry)}")
                continue
            if name in found:
                warnings.append(f"tool {name!r} is declared more than once; the first is used")
                continue
            parameters = function.get("parameters")
            parameters = ANY_OBJECT if parameters is None else parameters
            found[name] = Tool(name, parameters, rules.get(name), cache=cache, owner=owner)
        return cls(
            found, clean=clean, undeclared=undeclared, warnings=warnings, now=now, budget=budget
        )

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def check(
        self, call: Mapping[str, Any], undeclared: UndeclaredPolicy | None = None
    ) -> CheckedCall:
        """Problems with one tool call (`{"id", "type": "function", "function": {...}}`);
        `undeclared` overrides the catalog's policy for names the schema does not declare.
        Within the catalog's budget: a call it cannot judge in time comes back `unchecked`."""
        if self.budget is None:
            return self._check(call, undeclared)
        try:
            self.budget.check()
            with self.budget.running():
                return self._check(call, undeclared)
        except BudgetSpent as exc:
            return CheckedCall(call, warnings=(f"not checked: {exc}",), unchecked=True)

    def _check(self, call: Mapping[str, Any], undeclared: UndeclaredPolicy | None) -> CheckedCall:
        if call.get("type", "function") != "function":
            return CheckedCall(call)  # custom and built-in tool calls are not ours to judge
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        name = function.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return CheckedCall(call, (Problem("unknown_tool", _str(name), self._unknown(name)),))
        raw = function.get("arguments")
        arguments, problem, changes = self._parse(tool.name, raw)
        if problem is not None:
            return CheckedCall(call, (problem,))
        if self.clean:
            arguments, cleaned = clean_arguments(arguments, tool.schema.schema)
            changes += cleaned
        found: list[Problem] = []
        if tool.schema.validator is not None:  # an unusable schema declares nothing we can read
            policy = undeclared or self.undeclared
            review = review_parameters(arguments, tool.schema.schema, policy, rename=self.clean)
            arguments = review.arguments
            changes += review.changes
            if review.renamed and self.clean:  # cleaned again, by the declared name's schema
                arguments, cleaned = clean_arguments(arguments, tool.schema.schema)
                changes += cleaned
            found = [_undeclared_problem(tool.name, u) for u in review.undeclared]
        problems, warnings = self._judge(tool, arguments, found)
        if changes:
            serialized = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
            call = {**call, "function": {**function, "arguments": serialized}}
        return CheckedCall(call, tuple(problems), tuple(changes), arguments, tuple(warnings))

    def _parse(self, tool: str, raw: Any) -> tuple[Any, Problem | None, list[Change]]:
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            if self.clean:  # no arguments at all: the empty object, nothing invented
                return {}, None, [Change(f"arguments: {show(raw)} -> {{}}", "empty_arguments")]
            message = f"arguments are empty ({show(raw)}); expected a JSON object, e.g. {{}}"
            return None, Problem("invalid_json", tool, message), []
        if not isinstance(raw, str):
            message = f"arguments must be a string holding a JSON object, not {show(raw)}"
            return None, Problem("invalid_json", tool, message), []
        try:
            arguments = strict_loads(raw)
        except json.JSONDecodeError as exc:
            near = raw[max(0, exc.pos - 20) : exc.pos + 20]
            message = f"arguments are not valid JSON: {exc.msg} at char {exc.pos} (near {near!r})"
        except ValueError as exc:
            message = f"arguments are not valid JSON: {exc}"
        except RecursionError:
            message = f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
        else:
            if not isinstance(arguments, dict):
                message = f"arguments must be a JSON object, not {show(arguments)}"
            elif too_deep(raw, arguments, MAX_ARGUMENT_DEPTH):
                message = f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            else:
                return arguments, None, []
        return None, Problem("invalid_json", tool, message), []

    def _judge(
        self, tool: Tool, arguments: Any, found: list[Problem]
    ) -> tuple[list[Problem], list[str]]:
        problems: list[Problem] = list(found)
        warnings: list[str] = []
        try:
            problems += [
                Problem("schema", tool.name, line) for line in tool.schema.errors(arguments)
            ]
        except UnusableSchema as exc:
            warnings.append(f"tool {tool.name!r}: not validated, its schema is unusable: {exc}")
        if tool.rule is not None:
            schema_ok = not problems
            now = self._now()
            problems += check_rules(tool.name, tool.rule, arguments, now=now, judge_types=schema_ok)
            # Hooks are code written for well-formed arguments: they only see those.
            if tool.rule.hook is not None and schema_ok:
                problems += run_hook(tool.rule.hook, tool.name, arguments)
        return problems, warnings

    def _unknown(self, name: Any) -> str:
        names = self.names
        if not isinstance(name, str) or not name:
            head = f"the tool call has no function name ({show(name)})"
        else:
            head = f"tool {name!r} does not exist"
            close = _closest(name, names)
            if close:
                head += f" (did you mean {close!r}?)"
        if not names:
            return f"{head}; the request declares no tools"
        listed = ", ".join(names[:_LISTED_NAMES])
        if len(names) > _LISTED_NAMES:
            listed += f" and {len(names) - _LISTED_NAMES} more"
        return f"{head}; available tools: {listed}"


def _undeclared_problem(tool: str, found: Undeclared) -> Problem:
    """Worded like the schema's own messages, with the names it does take."""
    where = json_path(found.path)
    owner = f"tool {tool!r}" if not found.path else "this object"
    message = f"{where}: {found.name!r} is not a parameter of {owner}"
    close = difflib.get_close_matches(found.name, found.missing, n=1, cutoff=0.6)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    listed = ", ".join(found.declared[:_LISTED_NAMES]) or "none"
    return Problem("undeclared_parameter", tool, f"{message}; its parameters: {listed}")


def check_tool_choice(
    tool_choice: Any, calls: Sequence[Mapping[str, Any]], content: str | None
) -> list[Problem]:
    """Problems with an answer (its tool calls and text) under the request's `tool_choice`:
    "none" with calls, "required" without, a named function with none or other calls, and
    `allowed_tools` with calls outside the list."""
    names = [_call_name(call) for call in calls]
    text = " (it answered with text instead)" if content and content.strip() else ""
    if tool_choice == "none":
        if not names:
            return []
        called = ", ".join(repr(n) for n in names)
        return [
            Problem("tool_choice", None, f"tool_choice is 'none' but the answer calls {called}")
        ]
    if tool_choice == "required":
        if names:
            return []
        message = f"tool_choice is 'required': the answer must call at least one tool{text}"
        return [Problem("tool_choice", None, message)]
    if not isinstance(tool_choice, Mapping):
        return []  # "auto", absent, or a form upstream validates
    if tool_choice.get("type") == "function":
        function = tool_choice.get("function")
        wanted = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
        return _named_choice(_str(wanted), names, text)
    if tool_choice.get("type") == "allowed_tools":
        return _allowed_tools(tool_choice.get("allowed_tools"), names, text)
    return []


def _named_choice(wanted: str, names: list[str], text: str) -> list[Problem]:
    if not names:
        message = f"tool_choice requires a call to {wanted!r}; the answer has none{text}"
        return [Problem("tool_choice", wanted, message)]
    return [
        Problem(
            "tool_choice", name, f"tool_choice allows only {wanted!r}; the answer calls {name!r}"
        )
        for name in names
        if name != wanted
    ]


def _allowed_tools(spec: Any, names: list[str], text: str) -> list[Problem]:
    if not isinstance(spec, Mapping):
        return []
    allowed = [_tool_name(tool) for tool in spec.get("tools") or ()]
    listed = ", ".join(allowed)
    problems = [
        Problem("tool_choice", name, f"tool {name!r} is not among the allowed tools: {listed}")
        for name in names
        if name not in allowed
    ]
    if spec.get("mode") == "required" and not names:
        message = f"tool_choice requires a call to one of: {listed}; the answer has none{text}"
        problems.append(Problem("tool_choice", None, message))
    return problems


def _tool_name(tool: Any) -> str:
    """`{"type": "function", "function": {"name"}}`, or the flat `{"type", "name"}` form."""
    function = _function_of(tool)
    if function is not None:
        return _str(function.get("name"))
    return _str(tool.get("name")) if isinstance(tool, Mapping) else ""


def _function_of(tool: Any) -> Mapping[str, Any] | None:
    if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
        return None
    function = tool.get("function")
    return function if isinstance(function, Mapping) else None


def _call_name(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    return _str(function.get("name") if isinstance(function, Mapping) else None)


def _closest(name: str, names: list[str]) -> str | None:
    by_case = {n.lower(): n for n in names}
    for candidate in (name.lower(), name.replace(".", "_").lower()):
        if candidate in by_case:
            return by_case[candidate]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return close[0] if close else None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
