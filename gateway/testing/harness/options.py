"""A benchmark's command-line options declared once, as a dataclass: each field is a flag
(`--field-name`, or the `flag` given to `option`) with the field's default, type and help, so
an option is not spelled out again in argparse and copied over field by field.

Supported field types: bool (a switch), int, float, str, Path, and any of them `| None`
(None as the default: the flag may be left out). A `parse` function reads other types from
the flag's text (e.g. "16,64" as a tuple of ints).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_SCALARS: tuple[type, ...] = (bool, int, float, str, Path)


def listed(kind: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """A `parse` for comma-separated values: `listed(int)` reads "16,64" as (16, 64)."""
    return lambda text: tuple(kind(part) for part in text.split(","))


def option(
    default: Any,
    help: str = "",
    *,
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    parse: Callable[[str], Any] | None = None,
    cli: bool = True,
) -> Any:
    """A dataclass field that is also a command-line flag (`cli=False`: a field only)."""
    metadata = {"help": help, "flag": flag, "choices": choices, "parse": parse, "cli": cli}
    if isinstance(default, list | dict | set):
        raise TypeError("a mutable default: use a tuple, or a field with default_factory")
    return dataclasses.field(default=default, metadata=metadata)


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and each flag's default in its help."""


def _scalar(hint: Any) -> type | None:
    """The scalar type of `hint` (`float | None` -> float), None if it is no supported one."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        return _scalar(kinds[0]) if len(kinds) == 1 else None
    return hint if hint in _SCALARS else None


def parser_for(cls: type, description: str | None = None) -> argparse.ArgumentParser:
    """An argument parser with one flag per field of the dataclass `cls`."""
    parser = argparse.ArgumentParser(description=description, formatter_class=_Formatter)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if not field.init or meta.get("cli") is False:
            continue
        flag = meta.get("flag") or "--" + field.name.replace("_", "-")
        help_text = meta.get("help") or " "  # " ": argparse shows the default only with a help
        default: Any = None
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        kind = meta.get("parse") or _scalar(hints[field.name])
        if kind is None:
            raise TypeError(f"{cls.__name__}.{field.name}: give `parse` for {hints[field.name]}")
        if kind is bool:
            if default is not False:
                raise TypeError(f"{cls.__name__}.{field.name}: a switch defaults to False")
            parser.add_argument(flag, dest=field.name, action="store_true", help=help_text)
            continue
        parser.add_argument(
            flag,
            dest=field.name,
            type=kind,
            default=default,
            choices=meta.get("choices"),
            help=help_text,
        )
    return parser


def parse_options(
    cls: type[T], argv: Sequence[str] | None = None, description: str | None = None
) -> T:
    """`cls` (a dataclass) built from the command line (`argv`, or sys.argv's)."""
    args = parser_for(cls, description).parse_args(argv)
    return cls(**vars(args))
