"""docs/ARCHITECTURE.md stays true to the code: every module is on it (and nothing it names is
gone), every RequestContext field says which stage writes it, and modules import one way
(no cycles, counting imports made only for type checking or inside functions)."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

from gateway.context import RequestContext

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gateway"
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")


def _modules() -> list[str]:
    """Every module's path below gateway/, as the doc names it (`reply/stream.py`)."""
    return sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def _named_in_doc() -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", DOC))


def test_every_module_is_on_the_map() -> None:
    missing = [m for m in _modules() if m not in _named_in_doc()]
    assert not missing, f"docs/ARCHITECTURE.md does not name: {', '.join(missing)}"


def test_the_map_names_no_module_that_is_gone() -> None:
    modules = set(_modules())
    gone = sorted(
        name
        for name in _named_in_doc()
        if not name.startswith(("tests/", "bench/", "scripts/")) and name not in modules
    )
    assert not gone, f"docs/ARCHITECTURE.md names modules that do not exist: {', '.join(gone)}"


def test_every_context_field_says_who_writes_it() -> None:
    section = DOC.split("## Who writes the context", 1)
    assert len(section) == 2, "docs/ARCHITECTURE.md lacks its '## Who writes the context' table"
    listed = set(re.findall(r"`(\w+)`", section[1].split("\n## ", 1)[0]))
    missing = [f.name for f in dataclasses.fields(RequestContext) if f.name not in listed]
    assert not missing, f"RequestContext fields missing from the table: {', '.join(missing)}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> Iterator[str]:
    """The gateway modules `path` imports anywhere in it (a package counts as its __init__)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                yield child if child in known else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_modules_import_one_way() -> None:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    known = set(paths)
    graph = {
        name: {m for m in _imports(path, known) if m in known and m != name}
        for name, path in paths.items()
    }
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
