"""Check the routing development sets (the data bench/routing_fit.py fits on).

bench/data/routing_dev.yaml, math word problems: each entry has `text`, `language` (en or zh),
`steps` (items like "12 * 3 = 36": one operation on two numbers, + - * / or **) and `answer`.
A step's left side is evaluated with Python arithmetic (parsed, never eval'd) and must equal
its right side within 1e-6; the last step's result must equal `answer`.
bench/data/routing_dev_general.yaml, general prompts labelled by hand: `text`, `language`,
`domain`, `difficulty` in [0, 1] and `why`, nothing else.

Exit status 1 on any problem.

    python bench/check_routing_dev.py [FILE ...]    (default: both files)
"""

from __future__ import annotations

import ast
import operator
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

DEV = Path(__file__).resolve().parent / "data" / "routing_dev.yaml"
DEV_GENERAL = DEV.parent / "routing_dev_general.yaml"
TOLERANCE = 1e-6
GENERAL_FIELDS = ("text", "language", "domain", "difficulty", "why")
_OPERATIONS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _number(node: ast.expr) -> float:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_number(node.operand)
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"not a number: {ast.unparse(node)!r}")


def evaluate(step: str) -> tuple[float, float]:
    """(the left side's value, the right side) of "a op b = c"; ValueError if not that shape."""
    left, sep, right = step.partition("=")
    if not sep or "=" in right:
        raise ValueError(f"not 'a op b = c': {step!r}")
    expr = ast.parse(left.strip(), mode="eval").body
    if not isinstance(expr, ast.BinOp) or type(expr.op) not in _OPERATIONS:
        raise ValueError(f"not one arithmetic operation: {left.strip()!r}")
    value = _OPERATIONS[type(expr.op)](_number(expr.left), _number(expr.right))
    return value, _number(ast.parse(right.strip(), mode="eval").body)


def _text_and_language(entry: dict[str, Any]) -> list[str]:
    found = []
    if not isinstance(entry.get("text"), str) or not entry["text"].strip():
        found.append("no text")
    if entry.get("language") not in ("en", "zh"):
        found.append(f"language {entry.get('language')!r}")
    return found


def problems(entry: dict[str, Any]) -> list[str]:
    """What is wrong with one word problem (empty when it is right)."""
    found = _text_and_language(entry)
    steps = entry.get("steps")
    if not isinstance(steps, list) or not steps:
        return [*found, "no steps"]
    value = None
    for step in steps:
        try:
            value, stated = evaluate(step)
        except (ValueError, SyntaxError, ZeroDivisionError) as exc:
            found.append(str(exc))
            continue
        if abs(value - stated) > TOLERANCE:
            found.append(f"{step!r}: the left side is {value!r}")
    answer = entry.get("answer")
    if not isinstance(answer, (int, float)) or value is None or abs(value - answer) > TOLERANCE:
        found.append(f"answer {answer!r}, but the last step gives {value!r}")
    return found


def general_problems(entry: dict[str, Any]) -> list[str]:
    """What is wrong with one general prompt (empty when it is right)."""
    if not isinstance(entry, dict):
        return ["not a mapping"]
    found = [f"unknown field {k!r}" for k in entry if k not in GENERAL_FIELDS]
    found += _text_and_language(entry)
    for name in ("domain", "why"):
        if not isinstance(entry.get(name), str) or not entry[name].strip():
            found.append(f"no {name}")
    value = entry.get("difficulty")
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        found.append(f"difficulty {value!r}, not in [0, 1]")
    return found


def load(path: Path = DEV) -> list[dict[str, Any]]:
    entries = yaml.safe_load(path.read_text("utf-8"))
    if not isinstance(entries, list):
        raise SystemExit(f"{path}: expected a list of entries")
    return entries


def checker(path: Path) -> Callable[[dict[str, Any]], list[str]]:
    return general_problems if path.name == DEV_GENERAL.name else problems


def checked(path: Path) -> list[dict[str, Any]]:
    """The entries of `path`; SystemExit naming the first problem if there is one."""
    entries = load(path)
    bad = [(i, p) for i, e in enumerate(entries) for p in checker(path)(e)]
    if bad:
        raise SystemExit(f"{path}: {len(bad)} problems, first {bad[0]}; see check_routing_dev.py")
    return entries


def counts(counter: Counter[Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    bad = 0
    for path in [Path(a) for a in args] or [DEV, DEV_GENERAL]:
        entries = load(path)
        found = 0
        for i, entry in enumerate(entries):
            for problem in checker(path)(entry):
                found += 1
                print(f"{path}: entry {i} ({str(entry.get('text'))[:50]!r}): {problem}")
        languages = counts(Counter(e.get("language") for e in entries))
        if checker(path) is problems:
            steps = Counter(len(e.get("steps") or []) for e in entries)
            kinds = "steps: " + ", ".join(f"{k}: {steps[k]}" for k in sorted(steps))
        else:
            kinds = "domains: " + counts(Counter(e.get("domain") for e in entries))
        print(f"{len(entries)} entries ({languages}); {kinds}; {found} problems")
        bad += found
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
