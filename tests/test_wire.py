import pytest

from gateway.errors import InvalidRequest
from gateway.wire import ChatCompletionRequest, validate

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
