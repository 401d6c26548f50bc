"""What is wrong with a tool call, worded for the model that has to fix it.

Every message names the argument by path and shows the offending value, because the message is
sent back to the model as is: "$.amount: 'abc' is not of type 'number'" can be acted on,
"validation failed" cannot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

ProblemKind = Literal[
    "unknown_tool",
    "invalid_json",
    "schema",
    "undeclared_parameter",
    "rule",
    "policy_error",
    "tool_choice",
]
"""unknown_tool, invalid_json, schema, undeclared_parameter (a name the schema does not declare,
where it does not say `additionalProperties`), rule and tool_choice are the model's to fix;
policy_error means a rule or hook could not be applied (a broken hook, a bad pattern): asking the
model again will not help."""

MODEL_FIXABLE: frozenset[ProblemKind] = frozenset(
    {"unknown_tool", "invalid_json", "schema", "undeclared_parameter", "rule", "tool_choice"}
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHOW_CHARS = 80

PathPart = str | int


@dataclass(frozen=True, slots=True)
class Problem:
    kind: ProblemKind
    tool: str | None
    message: str

    def __str__(self) -> str:
        return self.message


def _path_tail(path: Iterable[PathPart]) -> str:
    out = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)


def json_path(path: Iterable[PathPart]) -> str:
    """`$.items[0].sku`: the path of an argument inside the arguments object."""
    return "$" + _path_tail(path)


def argument_path(path: Iterable[PathPart]) -> str:
    """`items[0].sku` (no `$.`): how cleaning changes name the argument they touched."""
    tail = _path_tail(path)
    return tail[1:] if tail.startswith(".") else tail or "$"


def show(value: Any, limit: int = _SHOW_CHARS) -> str:
    """A short rendering of a value: strings quoted like jsonschema's messages, the rest as JSON
    (`true`, `null`), cut at `limit` characters so a huge argument does not flood the message."""
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, list):
        text = "[" + ", ".join(show(item, limit) for item in value) + "]"
    elif isinstance(value, dict):
        items = (f"{show(str(k), limit)}: {show(v, limit)}" for k, v in value.items())
        text = "{" + ", ".join(items) + "}"
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
