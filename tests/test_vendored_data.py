"""The copies under tests/data equal their sources in ../shared (tests/data/README.md).

Only the comparison needs ../shared: it skips where that is absent, as in a user's clone, and
the tests that read the copies run either way."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENDORED = sorted(
    path.relative_to(DATA).as_posix()
    for path in DATA.rglob("*")
    if path.is_file() and path.name != "README.md"
)


def test_the_openai_schema_is_vendored() -> None:
    assert "openai/openapi-subset.json" in VENDORED


@pytest.mark.parametrize("name", VENDORED)
def test_a_vendored_copy_equals_its_source(name: str) -> None:
    source = SHARED / name
    if not source.is_file():
        pytest.skip(f"no source to compare with: {source} is absent")
    assert (DATA / name).read_bytes() == source.read_bytes(), (
        f"tests/data/{name} differs from {source}: cp {source} tests/data/{name}"
    )
