"""A legacy completions request -> the chat body, and what only a native endpoint can do."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.completions.request import chat_body, native_only, parse
from gateway.errors import InvalidRequest

Json = dict[str, Any]


def test_the_chat_body_is_what_a_chat_client_sends_for_the_same_question() -> None:
    legacy = {
        "model": "m",
        "prompt": "Why is the sky blue?",
        "max_tokens": 30,
        "temperature": 0.2,
        "top_p": 0.9,
        "n": 2,
        "stop": ["\n"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "seed": 7,
        "user": "u1",
        "logit_bias": {"50256": -100},
        "stream": True,
        "stream_options": {"include_usage": True},
        "echo": False,
        "best_of": 2,
        "suffix": None,
        "logprobs": None,
        "vendor_knob": {"x": 1},  # unknown fields are forwarded, as on the chat path
    }
    parse(legacy)
    chat = {
        k: v
        for k, v in legacy.items()
        if k not in ("prompt", "echo", "best_of", "suffix", "logprobs")
    }
    chat["messages"] = [{"role": "user", "content": "Why is the sky blue?"}]
    assert chat_body(legacy, "Why is the sky blue?") == chat


def test_only_what_the_client_set_is_in_the_chat_body() -> None:
    assert chat_body({"model": "m", "prompt": "hi"}, "hi") == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
    }


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"echo": True}, "echo"),
        ({"logprobs": 0}, "logprobs"),
        ({"suffix": "!"}, "suffix"),
        ({"best_of": 3}, "best_of"),
        ({"best_of": 3, "n": 2}, "best_of"),
        ({"prompt": [5, 6]}, "prompt"),
        ({"prompt": [[5], [6]]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ["a", "b"], "stream": True}, "prompt"),
    ],
)
def test_what_needs_a_native_endpoint(extra: Json, param: str) -> None:
    refused = native_only(parse({"model": "m", "prompt": "hi", **extra}))
    assert refused is not None and refused[0] == param and refused[1]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"echo": False},
        {"best_of": 1},
        {"best_of": 2, "n": 2},
        {"suffix": ""},
        {"prompt": ["a", "b"]},
        {"prompt": "a long single prompt", "stream": True},
    ],
)
def test_what_translates(extra: Json) -> None:
    assert native_only(parse({"model": "m", "prompt": "hi", **extra})) is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": {"text": "hi"}}, "prompt"),
        ({"model": "m", "prompt": "hi", "best_of": 21}, "best_of"),
        ({"model": "m", "prompt": "hi", "stop": 5}, "stop"),
        ({"model": "m", "prompt": "hi", "logit_bias": {"1": "x"}}, "logit_bias.1"),
        ({"model": "m", "prompt": "hi", "echo": "yes"}, "echo"),
    ],
)
def test_refusals_name_the_legacy_field(body: Json, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body)
    assert info.value.param == param
