"""Reading config.yaml: YAML to a validated ConfigFile, with every bad field named by its dotted
path and line. Nothing else in the gateway parses YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.schema import ConfigFile
from gateway.config.settings import Settings, build_settings

DEFAULT_CONFIG_PATH = Path("config.yaml")


class ConfigError(Exception):
    """A config file that cannot be used; `problems` names each bad field by path (and line)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def parse_config(text: str, source: str = "<config>") -> ConfigFile:
    """Validate YAML text into a ConfigFile, or raise ConfigError naming every bad field."""
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(source, ["the top level must be a mapping"])
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err, root) for err in exc.errors()]) from None


def load_settings(path: Path | str = DEFAULT_CONFIG_PATH) -> Settings:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from None
    return build_settings(parse_config(text, str(path)), str(path))


def _describe(err: Any, root: yaml.Node | None) -> str:
    loc = tuple(err["loc"])
    path = _dotted(loc) or "(top level)"
    line = _line_of(root, loc)
    where = f"{path} (line {line})" if line else path
    hint = ""
    if "[key]" in loc and err["type"] == "string_type":
        hint = " (YAML reads unquoted yes/no/on/off as booleans: quote the name)"
    return f"{where}: {err['msg']}{hint}"


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node that `loc` reaches."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line
