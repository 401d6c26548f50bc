"""What a request's `tools` may declare before the tool guard will work on them.

Tool schemas come from clients, and each one costs the gateway CPU: compiling it, and matching
its patterns against every string of a call. A request over a limit (too many tools, schemas
too large, too many patterns, too wide an `anyOf`/`oneOf`) is refused with a 400 that names the
limit, before any upstream call, instead of being validated slowly for every tenant. Measuring
is linear in the size of the tools and stops at the first limit passed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config.guard import ToolLimits
from gateway.errors import InvalidRequest

SMALL_BYTES = 16 * 1024
"""Tools (and arguments) under this size, without patterns, are checked on the event loop:
a thread hop would cost more than the work."""


class ToolsOverLimit(InvalidRequest):
    code = "tools_over_limit"


@dataclass(frozen=True, slots=True)
class Declared:
    """What a request's tools declare, as far as the limits are concerned."""

    tools: int
    schema_bytes: int
    patterns: int
    widest_union: int


def measure(tools: Sequence[Any], limits: ToolLimits) -> Declared:
    """The declarations of `tools`; raises ToolsOverLimit at the first limit passed."""
    too_many(tools, limits)
    functions = [_parameters(t) for t in tools if _is_function(t)]
    try:
        size = len(json.dumps(functions, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError, RecursionError):
        size = 0  # not JSON: the request model refused it already, or it is not ours to size
    if size > limits.max_schema_bytes:
        raise ToolsOverLimit(
            f"The tools' parameter schemas take {size} bytes; this gateway accepts at most "
            f"{limits.max_schema_bytes} per request.",
            param="tools",
        )
    patterns, widest = _walk(functions, limits)
    return Declared(len(functions), size, patterns, widest)


def too_many(tools: Sequence[Any], limits: ToolLimits) -> None:
    """Raises ToolsOverLimit when `tools` has more entries than the limit (at once: no walk)."""
    if len(tools) > limits.max_tools:
        raise ToolsOverLimit(
            f"The request declares {len(tools)} tools; this gateway accepts at most "
            f"{limits.max_tools}.",
            param="tools",
        )


def light(tools: Sequence[Any], body_bytes: int | None) -> bool:
    """Whether checking calls to `tools` may stay on the event loop: a small request whose
    tools hold no pattern (a property named like one only sends the check off the loop)."""
    if body_bytes is not None and body_bytes >= SMALL_BYTES:
        return False
    try:
        text = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return len(text) < SMALL_BYTES and '"pattern' not in text


def _walk(functions: list[Any], limits: ToolLimits) -> tuple[int, int]:
    patterns = widest = 0
    stack: list[Any] = list(functions)
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, Mapping):
            continue
        if isinstance(node.get("pattern"), str):
            patterns += 1
        pattern_properties = node.get("patternProperties")
        if isinstance(pattern_properties, Mapping):
            patterns += len(pattern_properties)
        if patterns > limits.max_patterns:
            raise ToolsOverLimit(
                f"The tools' schemas declare more than {limits.max_patterns} patterns "
                "(`pattern` and `patternProperties` entries); this gateway accepts at most "
                f"{limits.max_patterns} per request.",
                param="tools",
            )
        for union in ("anyOf", "oneOf"):
            branches = node.get(union)
            if isinstance(branches, list):
                widest = max(widest, len(branches))
                if len(branches) > limits.max_alternatives:
                    raise ToolsOverLimit(
                        f"A tool schema's `{union}` has {len(branches)} alternatives; this "
                        f"gateway accepts at most {limits.max_alternatives}.",
                        param="tools",
                    )
        stack.extend(node.values())
    return patterns, widest


def _is_function(tool: Any) -> bool:
    return isinstance(tool, Mapping) and tool.get("type", "function") == "function"


def _parameters(tool: Mapping[str, Any]) -> Any:
    function = tool.get("function")
    return function.get("parameters") if isinstance(function, Mapping) else None
