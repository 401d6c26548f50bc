"""Benchmark options declared once, as a dataclass: flags, defaults, types and switches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.testing.harness.options import option, parse_options, parser_for


@dataclass(frozen=True)
class Opts:
    requests: int = option(100, "how many")
    rate: float = option(2.5, "per second")
    mode: str = option("a", "which", choices=("a", "b"))
    quick: bool = option(False, "fewer rounds")
    json_out: Path | None = option(None, "save here", flag="--json")
    sizes: tuple[int, ...] = option(
        (1, 2), "comma-separated", parse=lambda s: tuple(int(x) for x in s.split(","))
    )
    quiet: bool = option(False, cli=False)


def test_defaults_when_no_flag_is_given() -> None:
    assert parse_options(Opts, []) == Opts()


def test_each_field_is_a_flag_of_its_type() -> None:
    argv = [
        "--requests",
        "7",
        "--rate",
        "0.5",
        "--mode",
        "b",
        "--quick",
        "--json",
        "out.json",
        "--sizes",
        "16,64",
    ]
    got = parse_options(Opts, argv)
    assert got == Opts(7, 0.5, "b", True, Path("out.json"), (16, 64))


def test_choices_are_enforced_and_fields_off_the_command_line_have_no_flag() -> None:
    with pytest.raises(SystemExit):
        parse_options(Opts, ["--mode", "c"])
    with pytest.raises(SystemExit):
        parse_options(Opts, ["--quiet"])


def test_help_shows_each_default() -> None:
    assert "(default: 2.5)" in parser_for(Opts).format_help()


def test_a_type_it_cannot_read_needs_a_parse_function() -> None:
    @dataclass
    class Bad:
        pairs: tuple[int, ...] = option((1,), "no parse given")

    with pytest.raises(TypeError, match="give `parse`"):
        parser_for(Bad)
