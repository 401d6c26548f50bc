"""Responses requests -> chat bodies, and chat completions -> Response objects (unit)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest
from gateway.responses import output
from gateway.responses import request as translate
from gateway.wire import chat_params
from tests.e2e.helpers import assert_conforms

Json = dict[str, Any]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def chat_of(body: Json, history: list[Json] | None = None) -> Json:
    asked = translate.parse(body)
    turn = (history or []) + translate.conversation(translate.input_items(asked))
    chat = translate.chat_body(asked, body, turn)
    chat_params(chat)  # the translated body is a valid chat request
    return chat


def refused(body: Json) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        chat_of(body)
    return caught.value


def test_a_string_input_is_the_chat_body_a_chat_client_sends_for_the_same_question() -> None:
    # The cache scope hashes the chat body: equal bodies share entries.
    assert chat_of({"model": "m", "input": "What is 2+2?"}) == {
        "model": "m",
        "messages": [{"role": "user", "content": "What is 2+2?"}],
    }
    listed = {"model": "m", "input": [{"role": "user", "content": "What is 2+2?"}]}
    parts = {
        "model": "m",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "What is 2+2?"}],
            }
        ],
    }
    assert chat_of(listed) == chat_of(parts) == chat_of({"model": "m", "input": "What is 2+2?"})


def test_instructions_come_first_and_developer_messages_are_system_messages() -> None:
    chat = chat_of(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Answer in French."},
                {"role": "user", "content": "Hello"},
            ],
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hello"},
    ]


def test_content_parts_become_chat_parts() -> None:
    chat = chat_of(
        {
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]},
            ],
        }
    )
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
    ]


def test_function_calls_and_their_outputs_become_tool_calls_and_tool_messages() -> None:
    chat = chat_of(
        {
            "model": "m",
            "tools": [WEATHER],
            "input": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                },
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "get_weather",
                    "arguments": '{"city": "Rome"}',
                },
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "rain"}],
                },
            ],
        }
    )
    calls = chat["messages"][1]["tool_calls"]
    assert [c["id"] for c in calls] == ["c1", "c2"]  # parallel calls: one assistant message
    assert calls[1]["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    assert chat["messages"][2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {k: v for k, v in WEATHER.items() if k != "type"},
        }
    ]


def test_parameters_translate_and_responses_only_fields_stay_behind() -> None:
    chat = chat_of(
        {
            "model": "m",
            "input": "hi",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 50,
            "temperature": 0.5,
            "top_p": 0.9,
            "user": "u1",
            "reasoning": {"effort": "low", "summary": "auto"},
            "text": {"format": {"type": "json_schema", "name": "W", "schema": {"type": "object"}}},
            "metadata": {"k": "v"},
            "store": False,
            "include": [],
            "truncation": "disabled",
            "top_k": 5,  # not a Responses field: a provider extension, forwarded
            "stream": True,
        }
    )
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["max_completion_tokens"] == 50
    assert (chat["temperature"], chat["top_p"], chat["user"]) == (0.5, 0.9, "u1")
    assert chat["reasoning_effort"] == "low"
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "W", "schema": {"type": "object"}},
    }
    assert chat["top_k"] == 5
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    for field in ("metadata", "store", "include", "truncation", "text", "reasoning", "input"):
        assert field not in chat


def test_json_object_and_allowed_tools() -> None:
    chat = chat_of(
        {
            "model": "m",
            "input": "hi",
            "text": {"format": {"type": "json_object"}},
            "tools": [WEATHER, {**WEATHER, "name": "get_time"}],
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "get_time"}],
            },
        }
    )
    assert chat["response_format"] == {"type": "json_object"}
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_time"]
    assert chat["tool_choice"] == "required"


def test_a_continued_conversation_comes_before_this_turn_and_instructions_before_both() -> None:
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    chat = chat_of({"model": "m", "input": "And you?", "instructions": "Be nice."}, history)
    assert chat["messages"] == [
        {"role": "system", "content": "Be nice."},
        *history,
        {"role": "user", "content": "And you?"},
    ]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "m"}, "input", None),
        ({"model": "m", "input": [{"type": "web_search_call", "id": "w"}]}, "input[0].type", None),
        ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", None),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input[0].role", None),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].image_url",
            "unsupported_parameter",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "video"}]}]},
            "input[0].content[0].type",
            "unsupported_content_type",
        ),
        ({"model": "m", "input": [{"type": "function_call", "name": "f"}]}, "input[0]", None),
        ({"model": "m", "input": "x", "background": True}, "background", "unsupported_parameter"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", None),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice", None),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}},
            "text.format",
            None,
        ),
        ({"model": "m", "input": ["not an object"]}, "input[0]", None),
    ],
)
def test_what_cannot_be_translated_is_refused_with_the_field_named(
    body: Json, param: str, code: str | None
) -> None:
    err = refused(body)
    assert err.status == 400
    assert err.param == param, err
    if code is not None:
        assert err.code == code


def completion(message: Json, finish_reason: str = "stop", usage: Json | None = None) -> Json:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


def response_for(body: Json, answer: Json) -> Json:
    asked = translate.parse(body)
    choice = answer["choices"][0]
    return output.response_object(
        "resp_1",
        asked,
        body,
        model="m",
        output=output.output_items(answer),
        status="completed",
        created_at=1,
        usage=answer.get("usage"),
        finish_reason=choice["finish_reason"],
    )


def test_a_text_answer_is_a_message_item_and_the_response_conforms() -> None:
    body = {"model": "m", "input": "hi", "tools": [WEATHER], "metadata": {"a": "b"}, "user": "u"}
    response = response_for(body, completion({"role": "assistant", "content": "Hello"}))
    assert_conforms(response, "Response")
    assert response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "Hello"
    assert response["metadata"] == {"a": "b"} and response["user"] == "u"
    assert response["usage"]["input_tokens"] == 7 and response["usage"]["total_tokens"] == 10


def test_tool_calls_are_function_call_items_after_any_text() -> None:
    message = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    response = response_for({"model": "m", "input": "x"}, completion(message, "tool_calls"))
    assert_conforms(response, "Response")
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    call = response["output"][1]
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_1",
        "get_weather",
        '{"city":"Paris"}',
    )
    # and back: a later turn replays them as the chat message they were
    assert output.conversation_output(response["output"]) == [
        {"role": "assistant", "content": "Let me look.", "tool_calls": message["tool_calls"]}
    ]


def test_a_cut_answer_is_incomplete_and_usage_details_are_mapped() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 16,
        "total_tokens": 116,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 10},
    }
    answer = completion({"role": "assistant", "content": "Once upon"}, "length", usage)
    response = response_for({"model": "m", "input": "x", "max_output_tokens": 16}, answer)
    assert_conforms(response, "Response")
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 64
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 10


def test_a_refusal_is_a_refusal_part() -> None:
    answer = completion({"role": "assistant", "content": None, "refusal": "I can't help."})
    response = response_for({"model": "m", "input": "x"}, answer)
    assert_conforms(response, "Response")
    assert response["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't help."}]


def test_input_items_get_ids_and_a_string_is_one_user_message() -> None:
    items = translate.input_items(translate.parse({"model": "m", "input": "hi"}))
    assert len(items) == 1 and items[0]["id"].startswith("msg_")
    assert items[0]["content"] == [{"type": "input_text", "text": "hi"}]
    kept = translate.input_items(
        translate.parse({"model": "m", "input": [{"role": "user", "content": "x", "id": "msg_a"}]})
    )
    assert kept[0]["id"] == "msg_a"


def test_reasoning_content_is_a_reasoning_item_and_is_not_replayed_to_chat() -> None:
    message = {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4."}
    response = response_for({"model": "m", "input": "2+2?"}, completion(message))
    assert_conforms(response, "Response")
    assert [item["type"] for item in response["output"]] == ["reasoning", "message"]
    assert output.conversation_output(response["output"]) == [{"role": "assistant", "content": "4"}]


def test_input_items_as_listed_conform_an_assistants_string_too() -> None:
    """An assistant message sent as a string is listed with the output_text part the official
    item schema requires (annotations and logprobs)."""
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    }
    items = translate.input_items(translate.parse(body))
    page = {"object": "list", "data": items, "first_id": "", "last_id": "", "has_more": False}
    assert_conforms(page, "ResponseItemList")
    assert chat_of(body)["messages"][1] == {"role": "assistant", "content": "a"}
