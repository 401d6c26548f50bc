"""The demo model that makes the mistakes agents see (`demo-misbehave`, any demo model whose
name starts so), so every guard can be tried offline. Deterministic: the same request gets the
same mistake.

A word in the client's last message picks the mistake, for the first declared tool that can
carry it (the one `tool_choice` names, when it names one):

    hallucinate    (the default) a tool that was not declared: `get_weather_v2`
    wrong-type     an argument of another JSON type: "lots" for a number, 42 for a string
    missing-field  a required argument left out
    extra-field    an argument the schema does not declare
    bad-value      an argument outside its enum, pattern, format or range
    bad-json       arguments that are not JSON (cut short)
    repeat         a valid call, then the same call again after each tool result (a loop)

`name=value` sets an argument (JSON, or else text: `amount=5000`, `city="New York"`), to break
a business rule the demo cannot know; with no mistake named, the call is made as set.

The guard's feedback is answered with the corrected call, reading the feedback as a model
would (a bound, the allowed values, a pattern, today's date); `stubborn` makes it repeat its
mistake instead, and `chatty` answer in prose without a call: both fail the repair, so
`on_failure` can be seen. Without tools, or after a tool result (but for `repeat`), it answers
as the demo model does.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import orjson

from gateway.guard.repair import CALL_ERROR, CALL_SKIPPED, RULES_BROKEN
from gateway.guard.schemas import Budget
from gateway.upstream.schema_instance import instance, is_valid
from gateway.util.tokens import message_text

Json = dict[str, Any]
PREFIX = "demo-misbehave"
MISTAKES = (
    "hallucinate",
    "wrong-type",
    "missing-field",
    "extra-field",
    "bad-value",
    "bad-json",
    "repeat",
)
REPAIRS = ("stubborn", "chatty")
CHATTY_TEXT = "Sorry, I got that call wrong. I will be more careful with the tools next time."
_WORDS = re.compile(r"(?<![\w-])(" + "|".join(MISTAKES + REPAIRS) + r")(?![\w-])", re.IGNORECASE)
_SETTING = re.compile(r'(?<![\w.=])([A-Za-z_]\w*)=("(?:[^"\\]|\\.)*"|[^\s,;]+)')
_PROBLEM = re.compile(r"\$\.([A-Za-z_]\w*)[^:;]*: ([^;]*)")
_NUMBER = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_WRONG_TYPE: dict[str, Any] = {
    "string": 42,
    "number": "lots",
    "integer": "lots",
    "boolean": "maybe",
    "array": "lots",
    "object": "lots",
}
_CHECKED_FORMATS = ("date", "date-time", "email", "idn-email", "ipv4", "ipv6", "uuid")
_EXTRA_NAMES = ("note", "comment", "extra")
_FIX_AGAIN = ". Send the call again, corrected."


def misbehaves(model: str) -> bool:
    return model.startswith(PREFIX)


def answer(
    body: Json, label: str, functions: list[Json], index: int, budget: Budget
) -> Json | None:
    """The assistant message, or None to answer as the demo model does. `functions`: the
    declared tools, the one to call first."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not functions or body.get("tool_choice") == "none" or not messages:
        return None
    order = _Order.read(_client_text(messages))
    last = messages[-1]
    if _is_feedback(last):  # a repair
        if order.repair == "chatty":
            return _text(f"{label} {CHATTY_TEXT}")
        tool, name, arguments = _mistaken(order, functions, budget)
        if order.repair == "stubborn" and arguments is not None:
            return _call_message(name, arguments, messages, index)
        mistake = _changed(_valid(order, tool, budget), arguments)
        fixed = _corrected(order, tool, _feedback_text(messages), mistake, budget)
        return _call_message(tool["name"], fixed, messages, index)
    if last.get("role") == "tool":
        previous = _previous_call(messages)
        if order.mistake != "repeat" or previous is None:
            return None
        return _call_message(previous[0], previous[1], messages, index)
    _, name, arguments = _mistaken(order, functions, budget)
    if arguments is None:  # no declared tool can carry this mistake: say so
        wanted = _NEEDS[order.mistake]
        return _text(f"{label} No declared tool can show '{order.mistake}': it needs {wanted}.")
    return _call_message(name, arguments, messages, index)


@dataclass(frozen=True, slots=True)
class _Order:
    """What the client's message asks of the demo: the mistake, how to take a repair, and
    arguments set by hand; `text` is the rest, what strings default to."""

    mistake: str
    repair: str
    settings: Json
    text: str

    @classmethod
    def read(cls, text: str) -> _Order:
        words = [w.lower() for w in _WORDS.findall(text)]
        settings = {name: _value(raw) for name, raw in _SETTING.findall(text)}
        default = "as-set" if settings else "hallucinate"  # arguments set: the call as set
        mistake = next((w for w in words if w in MISTAKES), default)
        repair = next((w for w in words if w in REPAIRS), "fix")
        rest = _WORDS.sub("", _SETTING.sub("", text))
        return cls(mistake, repair, settings, " ".join(rest.split()) or "demo")


_NEEDS = {
    "wrong-type": "a parameter with one declared type",
    "missing-field": "a required parameter",
    "extra-field": "a schema that lists its parameters",
    "bad-value": "a parameter with an enum, pattern, checked format or range",
}


def _value(raw: str) -> Any:
    """JSON when it reads as JSON (a sentence's full stop aside), else the text."""
    text = raw if raw.startswith('"') else raw.rstrip(".!?") or raw
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _client_text(messages: list[Json]) -> str:
    """The last user message the client wrote (not the guard's feedback)."""
    for message in reversed(messages):
        text = message_text(message) if message.get("role") == "user" else ""
        if text and not text.startswith(RULES_BROKEN):
            return text
    return ""


def _is_feedback(message: Json) -> bool:
    text = message_text(message)
    if message.get("role") == "tool":
        return text.startswith((CALL_ERROR, CALL_SKIPPED))
    return message.get("role") == "user" and text.startswith(RULES_BROKEN)


def _feedback_text(messages: list[Json]) -> str:
    """The feedback of the latest repair round: the messages after the last assistant one."""
    tail: list[str] = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        tail.append(message_text(message).removesuffix(_FIX_AGAIN))
    return "\n".join(reversed(tail))


def _previous_call(messages: list[Json]) -> tuple[str, Any] | None:
    """The last call the assistant made: its name and arguments."""
    for message in reversed(messages):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if isinstance(calls, list) and calls and isinstance(calls[0], dict):
            function = calls[0].get("function") or {}
            return str(function.get("name")), function.get("arguments")
    return None


# --- the mistakes ------------------------------------------------------------------------------


def _mistaken(order: _Order, functions: list[Json], budget: Budget) -> tuple[Json, str, Any]:
    """(the tool meant, the name called, the arguments sent: a dict, or text for bad-json);
    the arguments are None when no declared tool can carry the mistake."""
    for function in functions:
        arguments = _with_mistake(order, function, budget)
        if arguments is not None:
            name = str(function["name"])
            if order.mistake == "hallucinate":
                declared = {f["name"] for f in functions}
                while name in declared:
                    name += "_v2"
            return function, name, arguments
    return functions[0], str(functions[0]["name"]), None


def _valid(order: _Order, function: Json, budget: Budget) -> Json:
    """Arguments valid for the schema, with the ones set by hand."""
    schema = _parameters(function)
    built = instance(schema, order.text, 0, budget)
    arguments = built if isinstance(built, dict) else {}
    return {**arguments, **order.settings}


def _with_mistake(order: _Order, function: Json, budget: Budget) -> Any:
    schema = _parameters(function)
    arguments = _valid(order, function, budget)
    mistake = order.mistake
    if mistake in ("hallucinate", "repeat", "as-set"):
        return arguments
    if mistake == "bad-json":
        return orjson.dumps(arguments).decode()[:-1]  # the closing brace never came
    if mistake == "missing-field":
        required = [n for n in schema.get("required") or [] if isinstance(n, str)]
        wrong = [{k: v for k, v in arguments.items() if k != name} for name in required]
    elif mistake == "extra-field":  # the guard's policy judges it, not the schema
        names = _extra_names(schema)
        return {**arguments, names[0]: "added by the demo"} if names else None
    else:
        make = _wrong_type if mistake == "wrong-type" else _bad_values
        wrong = [
            {**arguments, name: value} for name, sub in _properties(schema) for value in make(sub)
        ]
    return next((a for a in wrong if is_valid(schema, a, budget) is False), None)


def _wrong_type(schema: Json) -> Iterator[Any]:
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _WRONG_TYPE:
        yield _WRONG_TYPE[kind]


def _bad_values(schema: Json) -> Iterator[Any]:
    """Values of the right type that break one of the schema's other constraints."""
    allowed = schema.get("enum")
    if isinstance(allowed, list) and allowed:
        lowered = {str(a).lower() for a in allowed}
        yield next(w for w in ("other", "unknown", "none-of-these", "x") if w not in lowered)
    if isinstance(schema.get("pattern"), str):
        yield from ("?", "not matching", "0", "")
    if schema.get("format") in _CHECKED_FORMATS:
        yield f"not-a-{schema['format']}"
    for bound, past in (("minimum", -1), ("maximum", 1)):  # just out of range
        if _number(schema.get(bound)):
            yield schema[bound] + past
        exclusive = "exclusive" + bound.capitalize()
        if _number(schema.get(exclusive)):
            yield schema[exclusive]
    if isinstance(schema.get("maxLength"), int):
        yield "x" * (schema["maxLength"] + 1)


def _extra_names(schema: Json) -> list[str]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []  # a schema that lists nothing takes anything
    declared = {_folded(n) for n in properties}
    return [n for n in _EXTRA_NAMES if _folded(n) not in declared][:1]


def _folded(name: str) -> str:
    return re.sub(r"[\W_]", "", name).lower()


# --- the repair --------------------------------------------------------------------------------


def _changed(valid: Json, arguments: Any) -> set[str]:
    """The arguments a mistake changed (none for text: the feedback names no argument)."""
    if not isinstance(arguments, dict):
        return set()
    return {k for k in {*valid, *arguments} if valid.get(k, ...) != arguments.get(k, ...)}


def _corrected(
    order: _Order, function: Json, feedback: str, mistake: set[str], budget: Budget
) -> Json:
    """Valid arguments, keeping the ones set by hand unless the feedback blames them (not the
    mistake); an argument blamed is built again, within what the feedback says."""
    schema = _parameters(function)
    declared = dict(_properties(schema))
    kept = {k: v for k, v in order.settings.items() if k in declared or not declared}
    hints: dict[str, Json] = {}
    for name, message in _PROBLEM.findall(feedback):
        if name in mistake:
            continue
        kept.pop(name, None)
        hints.setdefault(name, {}).update(_hint(message))
    fixed = _valid(replace(order, settings=kept), function, budget)
    for name, hint in hints.items():
        if hint:
            fixed[name] = instance({**declared.get(name, {}), **hint}, order.text, 0, budget)
    return {k: v for k, v in fixed.items() if k in declared or not declared}


def _hint(message: str) -> Json:
    """What a problem's words say about the value wanted, as JSON Schema keywords."""
    if found := re.search(r"(?:greater|less) than the (?:maximum|minimum) of " + _NUMBER, message):
        return {"const": orjson.loads(found[1])}  # as near as allowed to what was asked
    if found := re.search(r"today is (\d{4}-\d{2}-\d{2})", message):
        return {"const": found[1]}
    if found := re.search(r"now is (\S+?)\)", message):
        try:
            moment = datetime.fromisoformat(found[1]) + timedelta(days=1)
        except ValueError:
            return {}
        return {"const": moment.isoformat(timespec="seconds").replace("+00:00", "Z")}
    for words, keyword in (("is not one of ", "enum"), ("does not match ", "pattern")):
        if words in message:
            listed = message.split(words, 1)[1].removeprefix("the policy's pattern ")
            literal = _literal(listed.split(" (")[0].removesuffix("."))
            if isinstance(literal, list if keyword == "enum" else str):
                return {keyword: literal}
    return {}


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


# --- messages ----------------------------------------------------------------------------------


def _call_message(name: str, arguments: Any, messages: list[Json], index: int) -> Json:
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    digest = hashlib.sha256(f"{name}:{text}:{len(messages)}:{index}".encode()).hexdigest()[:24]
    call = {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": name, "arguments": text},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}


def _text(content: str) -> Json:
    return {"role": "assistant", "content": content, "refusal": None}


def _parameters(function: Json) -> Json:
    schema = function.get("parameters")
    return schema if isinstance(schema, dict) else {"type": "object"}


def _properties(schema: Json) -> list[tuple[str, Json]]:
    """The top-level parameters, required ones first."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = [n for n in schema.get("required") or [] if n in properties]
    names = [*required, *(n for n in properties if n not in required)]
    return [(n, properties[n]) for n in names if isinstance(properties[n], dict)]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
