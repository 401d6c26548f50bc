"""The labelled prompts the complexity score votes with: the shipped set, or a file of your own.

The shipped set (exemplars.yaml, beside this module) is written by the team, not taken from a
benchmark; `routing.scoring.exemplars` names a replacement in the same shape. A bad file is a
config error, raised when the scorer is built, never at request time.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from gateway.config.base import Strict
from gateway.config.loading import ConfigError

SHIPPED = "gateway/routing/exemplars.yaml"


@dataclass(frozen=True, slots=True)
class Exemplar:
    text: str
    difficulty: float  # 0 = any small model answers it well, 1 = needs the strongest
    domain: str = ""


class _ExemplarModel(Strict):
    text: str = Field(min_length=1)
    difficulty: float = Field(ge=0, le=1)
    domain: str = ""


class _ExemplarFile(Strict):
    exemplars: list[_ExemplarModel] = Field(min_length=1)


def load_exemplars(path: str | Path | None = None) -> tuple[Exemplar, ...]:
    """The exemplars in `path` (relative to the working directory), or the shipped set."""
    if path is None:
        text = resources.files("gateway.routing").joinpath("exemplars.yaml").read_text("utf-8")
        return parse_exemplars(text, SHIPPED)
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read the exemplars: {exc}"]) from None
    return parse_exemplars(text, str(path))


def parse_exemplars(text: str, source: str = "<exemplars>") -> tuple[Exemplar, ...]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    try:
        parsed = _ExemplarFile.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(source, problems) from None
    seen: dict[str, int] = {}
    problems = []
    for i, item in enumerate(parsed.exemplars):
        key = " ".join(item.text.split()).casefold()
        if key in seen:
            problems.append(f"exemplars.{i}: the same text as exemplars.{seen[key]}")
        seen.setdefault(key, i)
    if problems:
        raise ConfigError(source, problems)
    return tuple(Exemplar(e.text, e.difficulty, e.domain) for e in parsed.exemplars)
