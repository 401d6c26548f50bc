from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.wire import ChatCompletionRequest, chat_params, validate
from tests.reliability.fuzzing import fuzz_settings

OK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_unknown_fields_are_kept() -> None:
    request = validate(ChatCompletionRequest, {**OK, "vendor_knob": {"a": 1}})
    assert request.model_extra == {"vendor_knob": {"a": 1}}


@pytest.mark.parametrize(
    ("patch", "param", "code"),
    [
        ({"model": 123}, "model", "invalid_value"),
        ({"messages": "x"}, "messages", "invalid_value"),
        ({"messages": []}, "messages", "invalid_value"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
        ({"stream": "yes"}, "stream", "invalid_value"),
        ({"temperature": "hot"}, "temperature", "invalid_value"),
        ({"temperature": 3}, "temperature", "invalid_value"),
        ({"n": 0}, "n", "invalid_value"),
        # a content part's text is read by routing, the cache and the guards: a string or absent
        (
            {"messages": [{"role": "developer", "content": [{"type": "text", "text": 1e308}]}]},
            "messages[0].content[0].text",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
            "messages[0].content[0].type",
            "missing_required_parameter",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": ""}}]},
            "tools[0].function.name",
            "invalid_value",
        ),
    ],
)
def test_bad_fields_are_named(patch: dict[str, object], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate(ChatCompletionRequest, {**OK, **patch})
    assert (info.value.param, info.value.code) == (param, code)
    assert param in info.value.message


def test_missing_model_is_named() -> None:
    with pytest.raises(InvalidRequest, match="missing required parameter: 'model'"):
        validate(ChatCompletionRequest, {"messages": OK["messages"]})


def test_body_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        validate(ChatCompletionRequest, [OK])


def test_message_text_reads_only_text_parts_that_are_strings() -> None:
    from gateway.util.tokens import message_text

    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": 7}]
    assert message_text({"role": "user", "content": parts}) == "a"


# Values of every type a JSON body can hold, the edge cases of each field among them.
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 2, 128, 129, -1, 0.0, 0.5, 1.0, 2.0, 2.5, -0.1, "", "x", "user"]),
    st.lists(st.sampled_from(["x", 1, None]), max_size=2),
    st.dictionaries(st.sampled_from(["include_usage", "type", "x"]), st.booleans(), max_size=2),
)
_MESSAGE = st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_call_id", "tool_calls", "extra"]),
    st.one_of(st.sampled_from(["user", "system", "assistant", "tool", "wizard"]), _ANY),
)
_BODY = st.dictionaries(
    st.sampled_from(
        [
            "model",
            "stream",
            "stream_options",
            "n",
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "tools",
            "tool_choice",
            "vendor_knob",
        ]
    ),
    _ANY,
).flatmap(
    lambda body: st.builds(
        lambda messages, model: {**body, "messages": messages, "model": model},
        st.one_of(st.lists(_MESSAGE, max_size=3), _ANY),
        st.sampled_from(["m", "", 3]),
    )
)


@fuzz_settings(600)
@given(_BODY)
def test_the_plain_check_accepts_only_what_the_model_accepts(body: dict[str, Any]) -> None:
    try:
        model: ChatCompletionRequest | None = validate(ChatCompletionRequest, body)
    except InvalidRequest as refused:
        with pytest.raises(InvalidRequest) as again:
            chat_params(body)
        assert (again.value.param, again.value.code) == (refused.param, refused.code)
        model = None
    if model is not None:
        params = chat_params(body)
        assert (params.model, params.stream, params.n, params.wants_usage_in_stream) == (
            model.model,
            model.stream,
            model.n,
            model.wants_usage_in_stream,
        )


def test_a_plain_request_is_read_without_the_model() -> None:
    params = chat_params({**OK, "stream": True, "stream_options": {"include_usage": True}})
    assert not isinstance(params, ChatCompletionRequest)
    assert (params.model, params.stream, params.wants_usage_in_stream) == ("m", True, True)
