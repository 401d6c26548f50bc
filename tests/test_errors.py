"""What an error quotes of the client's input is bounded (gateway/errors.py: `echo`, `clip`,
and the last bound every GatewayError applies to its message and param)."""

from __future__ import annotations

from gateway.errors import (
    ECHO_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_PARAM_CHARS,
    GatewayError,
    InvalidRequest,
    clip,
    echo,
)


def test_a_short_value_is_quoted_whole() -> None:
    assert echo("gpt-4o") == "'gpt-4o'"
    assert echo("a'b\n") == repr("a'b\n")  # quotes and control characters show


def test_a_long_value_is_quoted_in_part_with_its_length() -> None:
    quoted = echo("m" * 200_000)
    assert quoted == f"{'m' * ECHO_CHARS!r}… (200000 characters)"
    assert len(quoted) < ECHO_CHARS + 40


def test_a_value_that_is_not_text_is_quoted_as_its_repr_in_part() -> None:
    assert echo({"a": 1}) == "{'a': 1}"
    assert len(echo(list(range(100_000)))) <= ECHO_CHARS


def test_clip_keeps_within_its_limit_and_says_so() -> None:
    assert clip("short", 10) == "short"
    clipped = clip("x" * 10_000, 300)
    assert len(clipped) <= 300 and clipped.endswith("more characters)")


def test_every_error_bounds_its_message_and_param() -> None:
    err = InvalidRequest("bad: " + "z" * 100_000, param="p" * 10_000)
    assert len(err.message) <= MAX_MESSAGE_CHARS
    assert err.param is not None and len(err.param) <= MAX_PARAM_CHARS
    body = GatewayError("x" * 50_000).body()["error"]
    assert len(body["message"]) <= MAX_MESSAGE_CHARS
