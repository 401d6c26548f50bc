"""The guards tried offline, as docs/GUARDS.md ("Try it offline") shows: the OpenAI SDK against
a gateway on the shipped config.yaml, whose `demo-misbehave` model makes each tool-call mistake
on request. Each one is caught and repaired, or stripped, passed or failed by policy, with the
headers saying so; the guard's feedback and the model's prose reply to it never reach the
client, plain or streamed, chat completions or the Responses API; a repeated call trips the
loop guard, whose stop the demo answers from the tool results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.config import load_settings
from gateway.guard.repair import STRIPPED_TEXT
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.upstream.demo_mistakes import CHATTY_TEXT
from tests.clients import sdk_client
from tests.e2e.helpers import shipped_config_apart

Json = dict[str, Any]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TRANSFER: Any = {
    "type": "function",
    "function": {
        "name": "transfer",
        "parameters": {
            "type": "object",
            "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
            "required": ["amount", "to"],
        },
    },
}
MISTAKES = ["hallucinate", "wrong-type", "missing-field", "extra-field", "bad-value", "bad-json"]
# What the client must never see: the guard's feedback, and what the model says back to it.
FEEDBACK = ("Error, the call was not executed", "Not executed, because", "Send the call again")


def client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "anything-in-anonymous-mode")


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def assert_no_feedback(text: str) -> None:
    assert CHATTY_TEXT not in text and not any(f in text for f in FEEDBACK), text


def streamed(gw: GatewayServer, **kw: Any) -> tuple[str, list[tuple[str, str]], str | None]:
    """(content, [(name, arguments)], finish_reason) of a streamed answer."""
    content, finish = "", None
    calls: dict[int, tuple[str, str]] = {}
    for chunk in client(gw).chat.completions.create(stream=True, **kw):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                name, arguments = calls.get(delta.index, ("", ""))
                function = delta.function
                calls[delta.index] = (
                    name + ((function and function.name) or ""),
                    arguments + ((function and function.arguments) or ""),
                )
            finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def test_demo_misbehave_is_listed(shipped_gateway: GatewayServer) -> None:
    assert "demo-misbehave" in {m.id for m in client(shipped_gateway).models.list()}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_is_repaired(shipped_gateway: GatewayServer, mistake: str) -> None:
    raw = client(shipped_gateway).chat.completions.with_raw_response.create(
        model="demo-misbehave", messages=ask(f"Weather in Paris? {mistake}"), tools=[WEATHER]
    )
    assert raw.headers["x-gateway-tool-guard"] == "repaired"
    choice = raw.parse().choices[0]
    [call] = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) in (
        {"city": "Weather in Paris?"},
        {"city": "Weather in Paris?", "unit": "celsius"},
    )


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_is_repaired_in_a_stream(shipped_gateway: GatewayServer, mistake: str) -> None:
    content, calls, finish = streamed(
        shipped_gateway,
        model="demo-misbehave",
        messages=ask(f"Weather in Paris? {mistake}"),
        tools=[WEATHER],
    )
    assert content == "" and finish == "tool_calls"
    [(name, arguments)] = calls
    assert name == "get_weather" and json.loads(arguments)["city"] == "Weather in Paris?"


@pytest.mark.parametrize("repair", ["stubborn", "chatty"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_failed_repair_is_stripped(
    shipped_gateway: GatewayServer, repair: str, stream: bool
) -> None:
    kw: Any = {
        "model": "demo-misbehave",
        "messages": ask(f"Weather in Paris? wrong-type {repair}"),
        "tools": [WEATHER],
    }
    if stream:
        content, calls, finish = streamed(shipped_gateway, **kw)
    else:
        raw = client(shipped_gateway).chat.completions.with_raw_response.create(**kw)
        assert raw.headers["x-gateway-tool-guard"] == "stripped"
        choice = raw.parse().choices[0]
        content, calls, finish = choice.message.content or "", [], choice.finish_reason
        assert not choice.message.tool_calls
    assert content == STRIPPED_TEXT and calls == [] and finish == "stop"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("repair", ["", "chatty"])
def test_the_responses_api_gets_neither_the_feedback_nor_the_reply(
    shipped_gateway: GatewayServer, stream: bool, repair: str
) -> None:
    tools: Any = [{"type": "function", **WEATHER["function"]}]
    kw: Any = {
        "model": "demo-misbehave",
        "input": f"Weather in Paris? missing-field {repair}",
        "tools": tools,
    }
    responses = client(shipped_gateway).responses
    if stream:
        with responses.stream(**kw) as events:
            response = events.get_final_response()
    else:
        raw = responses.with_raw_response.create(**kw)
        assert raw.headers["x-gateway-tool-guard"] == ("stripped" if repair else "repaired")
        response = raw.parse()
    assert_no_feedback(response.model_dump_json())
    calls = [item for item in response.output if item.type == "function_call"]
    if repair:
        assert calls == [] and response.output_text == STRIPPED_TEXT
    else:
        assert [c.name for c in calls] == ["get_weather"]


def test_a_repeated_call_trips_the_loop_guard(shipped_gateway: GatewayServer) -> None:
    messages = ask("Weather in Paris? repeat")
    for _ in range(3):  # max_identical_calls: 3
        raw = client(shipped_gateway).chat.completions.with_raw_response.create(
            model="demo-misbehave", messages=messages, tools=[WEATHER]
        )
        assert raw.headers["x-gateway-tool-guard"] == "ok"
        assert "x-gateway-loop-stop" not in raw.headers
        message = raw.parse().choices[0].message
        [call] = message.tool_calls or []
        messages += [
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
        ]
    raw = client(shipped_gateway).chat.completions.with_raw_response.create(
        model="demo-misbehave", messages=messages, tools=[WEATHER]
    )
    assert raw.headers["x-gateway-loop-stop"] == "identical_calls"
    message = raw.parse().choices[0].message
    assert not message.tool_calls
    assert (message.content or "").endswith(
        "The gateway stopped the tool calls. The tools returned: 18 C, sunny"
    )


# --- policies: a business rule, pass and error -------------------------------------------------

POLICIES = {
    "rules": {
        "match": {"models": ["demo", "demo-misbehave"]},
        "guard": {
            "tools": {
                "rules": {
                    "transfer": {
                        "arguments": {"amount": {"maximum": 1000}, "to": {"pattern": "^[A-Z]"}}
                    }
                }
            }
        },
    },
    "pass": {
        "match": {"models": ["demo-misbehave-pass"]},
        "guard": {"tools": {"on_failure": "pass"}},
    },
    "error": {
        "match": {"models": ["demo-misbehave-error"]},
        "guard": {"tools": {"on_failure": "error"}},
    },
}


@pytest.fixture(scope="module")
def policy_gateway(
    server_thread: ServerThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    """The shipped config with the policies above, and two more names for demo-misbehave."""
    config = shipped_config_apart(tmp_path_factory)
    directory = tmp_path_factory.mktemp("policy-gateway")
    config["policies"]["dir"] = str(directory / "policies")
    config["models"] += [
        {"name": f"demo-misbehave-{p}", "provider": "demo"} for p in ("pass", "error")
    ]
    settings = load_settings(write_config(directory, config, POLICIES))
    assert len(settings.policies.policies) == len(POLICIES)
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_business_rule_is_repaired(policy_gateway: GatewayServer, stream: bool) -> None:
    kw: Any = {
        "model": "demo-misbehave",
        "messages": ask("Send Bob 5000 euros. amount=5000 to=Bob"),
        "tools": [TRANSFER],
    }
    if stream:
        _, [(name, arguments)], _ = streamed(policy_gateway, **kw)
    else:
        raw = client(policy_gateway).chat.completions.with_raw_response.create(**kw)
        assert raw.headers["x-gateway-tool-guard"] == "repaired"
        [call] = raw.parse().choices[0].message.tool_calls or []
        name, arguments = call.function.name, call.function.arguments
    assert name == "transfer" and json.loads(arguments) == {"amount": 1000, "to": "Bob"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_plain_demo_breaking_a_rule_is_stripped_not_echoed(
    policy_gateway: GatewayServer, stream: bool
) -> None:
    """Issue 34's report: the demo model answers the feedback by echoing it; that text is not an
    answer."""
    kw: Any = {"model": "demo", "messages": ask("send bob 10 euros"), "tools": [TRANSFER]}
    if stream:
        content, calls, _ = streamed(policy_gateway, **kw)
    else:
        raw = client(policy_gateway).chat.completions.with_raw_response.create(**kw)
        assert raw.headers["x-gateway-tool-guard"] == "stripped"
        message = raw.parse().choices[0].message
        content, calls = message.content or "", message.tool_calls or []
    assert content == STRIPPED_TEXT and calls == []


@pytest.mark.parametrize("repair", ["stubborn", "chatty"])
def test_pass_forwards_the_mistake_with_its_problems(
    policy_gateway: GatewayServer, repair: str
) -> None:
    raw = client(policy_gateway).chat.completions.with_raw_response.create(
        model="demo-misbehave-pass",
        messages=ask(f"Weather in Paris? hallucinate {repair}"),
        tools=[WEATHER],
    )
    assert raw.headers["x-gateway-tool-guard"] == "passed"
    assert "'get_weather_v2' does not exist" in raw.headers["x-gateway-tool-problems"]
    message = raw.parse().choices[0].message
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather_v2"]
    assert message.content is None


@pytest.mark.parametrize("repair", ["stubborn", "chatty"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_error_answers_502(policy_gateway: GatewayServer, repair: str, stream: bool) -> None:
    """A plain answer is a 502; a stream has started (its content could have flowed), so the
    error is its last event."""
    with pytest.raises(openai.APIError) as info:
        answer = client(policy_gateway).chat.completions.create(
            model="demo-misbehave-error",
            messages=ask(f"Weather in Paris? bad-value {repair}"),
            tools=[WEATHER],
            stream=stream,
        )
        for _ in answer if stream else []:
            pass
    if not stream:
        assert isinstance(info.value, openai.APIStatusError) and info.value.status_code == 502
    assert info.value.code == "invalid_tool_call"
    assert "'other' is not one of ['celsius', 'fahrenheit']" in info.value.message
    assert_no_feedback(info.value.message)
