"""Degraded answers: the disclaimer, the level-4 completion, texts by language."""

from __future__ import annotations

from gateway import degradation
from tests.e2e.helpers import assert_conforms

TEXTS = {"en": "General knowledge.", "zh": "通用知识。"}


def test_language_picks_chinese_for_cjk_text_only() -> None:
    assert degradation.language_of("你好") == "zh"
    assert degradation.language_of("What is 东京?") == "zh"
    assert degradation.language_of("こんにちは") == "zh"  # CJK family: the zh text, not en
    assert degradation.language_of("Hello, world") == "en"
    assert degradation.language_of(None) == "en"
    assert degradation.localized(TEXTS, "你好") == "通用知识。"
    assert degradation.localized({"en": "x"}, "你好") == "x", "falls back to English"


def test_the_disclaimer_prefixes_text_answers_only() -> None:
    completion = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Paris."}},
            {"index": 1, "message": {"role": "assistant", "content": None, "tool_calls": []}},
        ]
    }
    out = degradation.with_disclaimer(completion, "Note.")
    assert out["choices"][0]["message"]["content"] == "Note.\n\nParis."
    assert out["choices"][1]["message"]["content"] is None


def test_the_disclaimer_chunk_joins_the_stream_it_precedes() -> None:
    first = {"id": "chatcmpl-1", "created": 7, "model": "m", "object": "chat.completion.chunk"}
    chunk = degradation.disclaimer_chunk(first, "Note.", choices=2)
    assert (chunk["id"], chunk["created"], chunk["model"]) == ("chatcmpl-1", 7, "m")
    assert [c["index"] for c in chunk["choices"]] == [0, 1]
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "Note.\n\n"}
    assert_conforms(chunk, "CreateChatCompletionStreamResponse")


def test_the_unavailable_completion_is_a_valid_openai_completion() -> None:
    completion = degradation.unavailable_completion("gpt-4o", "Down, retry soon.", choices=1)
    assert_conforms(completion, "CreateChatCompletionResponse")
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["model"] == "gpt-4o"
