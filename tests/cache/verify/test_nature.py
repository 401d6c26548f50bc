"""Which requests' answers vary by nature (not verified), and the bounded memory of entries
whose answers were seen to disagree with themselves."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cache.verify.nature import CREATIVE_CHARS, VARYING_TEMPERATURE, Varying, varies


def _body(text: str, **params: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **params}


@pytest.mark.parametrize(
    "text",
    [
        "Write a poem about the sea",
        "could you compose a short haiku on autumn leaves?",
        "Tell me a joke about databases.",
        "Make up a bedtime story with a dragon in it",
        "come up with five names for a coffee shop",
        "Generate song lyrics about rain",
    ],
)
def test_creative_requests_vary(text: str) -> None:
    assert varies(_body(text)) == "creative"


@pytest.mark.parametrize(
    "text",
    [
        "What is a haiku?",  # about poems, not a request for one
        "How do I reset my password?",
        "Write the SQL to count rows per day",
        "Who wrote the poem The Raven?",
        "",
    ],
)
def test_factual_requests_do_not(text: str) -> None:
    assert varies(_body(text)) is None


def test_an_explicit_high_temperature_varies_and_a_low_or_absent_one_does_not() -> None:
    assert varies(_body("What is 2+2?", temperature=VARYING_TEMPERATURE + 0.1)) == "temperature"
    assert varies(_body("What is 2+2?", temperature=VARYING_TEMPERATURE)) is None
    assert varies(_body("What is 2+2?", temperature=0)) is None
    assert varies(_body("What is 2+2?")) is None  # left to the asked-twice check


def test_only_the_head_of_a_long_prompt_is_read() -> None:
    late = "x " * CREATIVE_CHARS + "write a poem about it"
    assert varies(_body(late)) is None
    assert varies(_body("write a poem about this: " + "x " * 100_000)) == "creative"


def test_varying_entries_are_bounded_oldest_first() -> None:
    seen = Varying(size=3)
    for entry in "abcd":
        seen.add(entry)
    assert "a" not in seen and all(e in seen for e in "bcd")
    seen.add("b")  # seen again: the newest
    seen.add("e")
    assert "c" not in seen and "b" in seen
