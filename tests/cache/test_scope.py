from typing import Any

import pytest

from gateway.cache.scope import cache_key
from gateway.wire import last_user_text

BASE: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    "temperature": 0.2,
}


def _key(body: dict[str, Any], tenant: str = "t", model: str = "m") -> Any:
    return cache_key(tenant, model, body, "what is the capital of france")


def test_same_request_same_key_regardless_of_field_order_and_transport_fields() -> None:
    reordered = {
        "temperature": 0.2,
        "messages": BASE["messages"],
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u1",
    }
    assert _key(BASE) == _key(reordered)


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.3},
        {"top_p": 0.5},
        {"max_tokens": 10},
        {"seed": 7},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "none"},
        {"response_format": {"type": "json_object"}},
        {"some_future_field": True},
        {"messages": [{"role": "system", "content": "You are verbose."}, BASE["messages"][1]]},
        {
            "messages": [
                {"role": "user", "content": "earlier"},
                {"role": "assistant", "content": "ok"},
                BASE["messages"][1],
            ]
        },
    ],
)
def test_anything_that_changes_the_answer_changes_the_scope(change: dict[str, Any]) -> None:
    assert _key({**BASE, **change}).scope != _key(BASE).scope


def test_tenant_and_model_are_part_of_the_scope() -> None:
    assert _key(BASE, tenant="a").scope != _key(BASE, tenant="b").scope
    assert _key(BASE, model="m1").scope != _key(BASE, model="m2").scope


def test_last_turn_text_is_in_the_exact_key_not_the_scope() -> None:
    other = cache_key("t", "m", BASE, "what is the capital of spain")
    assert other.scope == _key(BASE).scope and other.exact != _key(BASE).exact


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        ({"role": "user", "content": "hi"}, "hi"),
        (
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            "a\nb",
        ),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, None),
        ({"role": "user", "content": "   "}, None),
        ({"role": "tool", "tool_call_id": "c", "content": "42"}, None),
        ({"role": "assistant", "content": "prefill"}, None),
    ],
)
def test_only_a_user_text_turn_is_cacheable(last: dict[str, Any], expected: str | None) -> None:
    assert last_user_text({"messages": [last]}) == expected
