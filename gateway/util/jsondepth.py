"""How deep parsed JSON nests, checked without recursion (deep input is what makes recursive
code fail), and only when the text has enough brackets to nest that deep at all."""

from __future__ import annotations

from typing import Any


def too_deep(text: str | bytes, data: Any, limit: int) -> bool:
    """Whether `data` (parsed from `text`) nests deeper than `limit` levels."""
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    return brackets > limit and nests_deeper_than(data, limit)


def nests_deeper_than(data: Any, limit: int) -> bool:
    stack = [(data, 1)] if isinstance(data, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False
