"""Reading config.yaml and policies/*.yaml: YAML to validated models, with every bad field named
by its file, dotted path and line. Nothing else in the gateway parses YAML."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.base import EntryProblem
from gateway.config.file import ConfigFile
from gateway.config.paths import config_dir, resolve_paths
from gateway.config.policy_set import Policy, PolicyProblem, PolicySet, validate_policy
from gateway.config.settings import Settings, build_settings
from gateway.config.suggest import did_you_mean

DEFAULT_CONFIG_PATH = Path("config.yaml")
log = logging.getLogger("gateway.config")

# A policy file is a few dozen lines; the largest shipped example is ~3 KB.
MAX_POLICY_BYTES = 256 * 1024
# Values a YAML file may hold once its aliases are expanded (every use of an anchor counts its
# whole value again): generous for anchors used to repeat a block, far below an alias bomb
# (nine levels of nine aliases expand to ~390 million values from under 1 KB).
MAX_EXPANDED_VALUES = 100_000


class ConfigError(Exception):
    """A config file that cannot be used; `problems` names each bad field by path (and line)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def parse_config(text: str, source: str = "<config>") -> ConfigFile:
    """Validate YAML text into a ConfigFile, or raise ConfigError naming every bad field."""
    root, data = _load_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(source, ["the top level must be a mapping"])
    try:
        file = ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err, root) for err in exc.errors()]) from None
    for warning in file.shared_redis().moved:  # accepted, but say what replaces them
        log.warning("%s: %s", source, warning)
    return file


def load_settings(path: Path | str = DEFAULT_CONFIG_PATH) -> Settings:
    """config.yaml and the policies beside it, all validated; ConfigError lists every problem.
    The paths the file holds come back absolute, resolved beside it (config/paths.py)."""
    path = Path(path)
    file = resolve_paths(parse_config(_read(path), str(path)), config_dir(path))
    policies = load_policies(policy_files(path, file), file, str(path))
    problems = policies.check()
    if problems:
        raise ConfigError(str(path), problems)
    try:
        return build_settings(file, str(path), policies=policies)
    except ValueError as err:  # keys that collide, placeholders (by variable, never by value)
        raise ConfigError(str(path), str(err).splitlines()) from None


def policy_files(config_path: Path, file: ConfigFile) -> list[Path]:
    """The policy files of a config, in name order (none when the directory does not exist)."""
    directory = config_path.parent / file.policies.dir
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_policies(paths: list[Path], file: ConfigFile, source: str) -> PolicySet:
    policies: list[Policy] = []
    problems: list[str] = []
    for path in paths:
        try:
            policies.append(parse_policy(_read(path), path.stem, str(path), file))
        except ConfigError as err:
            problems += [f"{err.source}: {p}" for p in err.problems]
    names = [p.name for p in policies]
    for twice in sorted({n for n in names if names.count(n) > 1}):
        both = " and ".join(str(p) for p in paths if p.stem == twice)
        problems.append(f"two policy files are named {twice!r}: {both} (keep one)")
    if problems:
        raise ConfigError(source, problems)
    return PolicySet(file, policies)


def parse_policy(text: str, name: str, source: str, file: ConfigFile) -> Policy:
    """One policy file, checked against the config it overlays."""
    size = len(text.encode("utf-8"))
    if size > MAX_POLICY_BYTES:
        raise ConfigError(
            source, [f"the file is {size} bytes; a policy file may hold at most {MAX_POLICY_BYTES}"]
        )
    root, data = _load_yaml(text, source)
    try:
        return validate_policy(name, source, data, file)
    except PolicyProblem as err:
        loc = tuple(int(p) if p.isdigit() else p for p in err.where.split(".") if p)
        line = line_of(root, loc) if loc else None
        where = f"{err.where} (line {line})" if line else err.where
        message = str(err).removeprefix(f"{err.where}: ") if err.where else str(err)
        raise ConfigError(source, [f"{where}: {message}" if where else message]) from None


def _load_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line numbers) and the data of `text`, refused when its aliases
    expand it past MAX_EXPANDED_VALUES: the data is built only after the check, and nothing
    downstream (validation, `gateway policy`'s JSON) walks an alias bomb."""
    try:
        root = yaml.compose(text)
        expanded = _expanded_size(root)
        if expanded > MAX_EXPANDED_VALUES:
            raise ConfigError(
                source,
                [
                    f"YAML aliases expand this file to more than {MAX_EXPANDED_VALUES} values "
                    f"({expanded if expanded < _RECURSIVE else 'a recursive alias'}); write "
                    "the repeated parts out, or use fewer aliases"
                ],
            )
        return root, yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc)]) from None


_RECURSIVE = 1 << 62  # an alias inside its own anchor: no finite expansion


def _expanded_size(root: yaml.Node | None) -> int:
    """How many values the tree holds with every alias expanded, counted without expanding
    (an anchored node's size is computed once, then added at each use), iteratively."""
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[key] = min(total, _RECURSIVE)
            continue
        if key in open_nodes:
            return _RECURSIVE
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                return _RECURSIVE
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where, without quoting the file: the line may hold a secret."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"not valid YAML: {problem}{where}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        hint = "run from the directory that holds it, or give --config PATH"
        raise ConfigError(str(path), [f"cannot read: no such file ({hint})"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from None


def _describe(err: Any, root: yaml.Node | None) -> str:
    loc = tuple(err["loc"])
    message = err["msg"]
    entry = (err.get("ctx") or {}).get("error")
    if isinstance(entry, EntryProblem):  # a cross-field check: report the entry it names
        loc, message = loc + entry.loc, str(entry)
    path = _dotted(loc) or "(top level)"
    line = line_of(root, loc)
    where = f"{path} (line {line})" if line else path
    hint = ""
    if "[key]" in loc and err["type"] == "string_type":
        hint = " (YAML reads unquoted yes/no/on/off as booleans: quote the name)"
    if err["type"] == "extra_forbidden":
        hint = did_you_mean(ConfigFile, loc)
    return f"{where}: {message}{hint}"


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


def line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
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
