"""Config files from Python dicts: config.yaml and policies written with `yaml.safe_dump`, so a
value with a colon, a quote or a newline is always quoted right (no YAML in f-strings)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

Json = dict[str, Any]


def dump_yaml(data: Mapping[str, Any]) -> str:
    """YAML text of `data`, keys in the order given (as a person would write the file)."""
    return yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, default_flow_style=None)


def write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(data), encoding="utf-8")
    return path


def write_config(
    directory: Path,
    config: Mapping[str, Any],
    policies: Mapping[str, Mapping[str, Any]] | None = None,
    name: str = "config.yaml",
) -> Path:
    """`config` as directory/NAME and each policy as directory/policies/<policy>.yaml (where
    the gateway looks for them by default); the config file's path."""
    for policy, data in (policies or {}).items():
        write_yaml(directory / "policies" / f"{policy}.yaml", data)
    return write_yaml(directory / name, config)


def openai_provider(
    base_url: str, timeouts: tuple[float, float, float] | None = None, **more: Any
) -> Json:
    """An `openai`-type provider at `base_url`; `timeouts`: connect, read, total seconds."""
    provider: Json = {"type": "openai", "base_url": base_url, **more}
    if timeouts is not None:
        provider["timeouts"] = dict(zip(("connect", "read", "total"), timeouts, strict=True))
    return provider
