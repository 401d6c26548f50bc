"""tests/tiers.py: the table names real tests, every kind is registered, kinds follow from a
test's place, fixtures and nature, and a test that starts a program unannounced fails."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


@pytest.mark.parametrize("place", sorted(tiers.PLACES))
def test_every_place_names_a_directory_file_or_test(place: str) -> None:
    path, _, test = place.partition("::")
    test = test.partition("[")[0]  # a place may name one parameter set
    assert (ROOT / path).exists(), f"{path} does not exist: renamed? update tests/tiers.py"
    assert not test or test in _test_names(ROOT / path), f"no {test} in {path}"
    kinds = set(tiers.PLACES[place])
    assert kinds and kinds <= set(tiers.KINDS) - {"unit"}, place


def test_every_kind_and_fast_is_registered() -> None:
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    registered = {line.split(":")[0] for line in pytest_options["ini_options"]["markers"]}
    assert registered == {*tiers.KINDS, "fast"}


def _item(nodeid: str, fixtures: tuple[str, ...] = (), obj: Any = None) -> Any:
    return SimpleNamespace(nodeid=nodeid, fixturenames=fixtures, obj=obj)


@given(st.integers())
def _a_hypothesis_test(x: int) -> None:
    pass


def _a_plain_test() -> None:
    pass


@pytest.mark.parametrize(
    ("item", "kinds"),
    [
        (_item("tests/test_redact.py::test_x", obj=_a_plain_test), {"unit"}),
        (_item("tests/e2e/test_sdk.py::test_x[sync]"), {"e2e"}),
        (_item("tests/scaleout/test_cache.py::test_x"), {"process", "redis"}),
        (_item("tests/test_ratelimit.py::test_x", ("redis_url",)), {"redis"}),
        (_item("tests/embedding/test_embedder.py::test_x", ("minilm",)), {"unit", "slow"}),
        (_item("tests/guard/test_rules.py::test_x", obj=_a_hypothesis_test), {"fuzz"}),
        (
            _item("tests/test_reload.py::test_sighup_reloads_a_running_gateway[a]"),
            {"process"},
        ),
        (_item("tests/test_reload.py::test_sighup_reloads_a_running_gateway_twice"), {"unit"}),
    ],
)
def test_kinds_follow_from_place_fixtures_and_nature(item: Any, kinds: set[str]) -> None:
    assert tiers.kinds_of(item) == kinds


class _Item:
    def __init__(self, *markers: str) -> None:
        self.nodeid = "tests/test_x.py::test_y"
        self.markers = markers

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def test_an_unmarked_test_cannot_start_a_program() -> None:
    with (
        tiers.refusing_unmarked_processes(_Item("unit", "fast")),  # type: ignore[arg-type]
        pytest.raises(tiers.UnmarkedProcessError, match=r"add it to PLACES in tests/tiers\.py"),
    ):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_the_standard_librarys_own_uname_is_let_through() -> None:
    with tiers.refusing_unmarked_processes(_Item("unit")):  # type: ignore[arg-type]
        subprocess.run(["uname", "-p"], capture_output=True, check=False)


def test_a_marked_test_starts_programs_freely() -> None:
    popen = subprocess.Popen.__init__
    for kind in tiers.MAY_START_PROGRAMS:
        with tiers.refusing_unmarked_processes(_Item(kind)):  # type: ignore[arg-type]
            assert subprocess.Popen.__init__ is popen
