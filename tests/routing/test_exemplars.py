"""The shipped exemplars load and cover the scale; a bad file is a config error."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from gateway.config.loading import ConfigError
from gateway.routing.exemplars import load_exemplars, parse_exemplars

HAN = re.compile("[\u4e00-\u9fff]")


def test_the_shipped_set_loads_and_is_valid() -> None:
    shipped = load_exemplars()
    assert 60 <= len(shipped) <= 150
    assert all(0 <= e.difficulty <= 1 and e.text.strip() and e.domain for e in shipped)
    assert len({e.domain for e in shipped}) >= 10
    chinese = [e for e in shipped if HAN.search(e.text)]
    assert 25 <= len(chinese) <= len(shipped) - 50  # both languages well represented
    for group in (chinese, [e for e in shipped if not HAN.search(e.text)]):
        assert min(e.difficulty for e in group) <= 0.05
        assert max(e.difficulty for e in group) >= 0.9


def test_the_shipped_files_are_package_data() -> None:
    for name in ("exemplars.yaml", "model.json"):
        assert resources.files("gateway.routing").joinpath(name).is_file()
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert '"gateway.routing" = ["exemplars.yaml", "model.json"]' in pyproject


def test_a_file_of_your_own(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("exemplars:\n  - {text: hi, difficulty: 0}\n  - {text: 证明, difficulty: 1}\n")
    loaded = load_exemplars(str(path))
    assert [(e.text, e.difficulty, e.domain) for e in loaded] == [("hi", 0, ""), ("证明", 1, "")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("exemplars: []", "at least 1"),
        ("exemplars:\n  - {text: hi, difficulty: 1.5}", "exemplars.0.difficulty"),
        ("exemplars:\n  - {text: hi, difficulty: 0.1, lang: en}", "exemplars.0.lang"),
        ("exemplars:\n  - {text: '', difficulty: 0.1}", "exemplars.0.text"),
        ("items:\n  - {text: hi, difficulty: 0.1}", "items"),
        ("exemplars: [unclosed", "not valid YAML"),
        ("exemplars:\n  - {text: Hi there, difficulty: 0}\n  - {text: hi  THERE, difficulty: 1}",
         "exemplars.1: the same text as exemplars.0"),
    ],
)  # fmt: skip
def test_bad_files_are_config_errors(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_exemplars(text, "mine.yaml")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the exemplars"):
        load_exemplars(tmp_path / "absent.yaml")
