"""The misbehaving demo model (upstream/demo_mistakes.py) against the real tool guard: each
mistake it is asked for is one the guard catches, its answer to the guard's feedback is a call
the guard accepts (business rules included), and `stubborn` and `chatty` fail the repair."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.config.guard import ToolGuardConfig
from gateway.guard.repair import Settled, settle
from gateway.guard.tools import ToolCatalog
from gateway.upstream.demo import DemoProvider
from gateway.upstream.demo_mistakes import CHATTY_TEXT

Json = dict[str, Any]
DEMO = DemoProvider(
    parse_config(
        "providers: {demo: {type: demo}}\nmodels: [{name: demo, provider: demo}]"
    ).providers["demo"]
)
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}
TRANSFER = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "to": {"type": "string"},
        "currency": {"type": "string"},
        "iban": {"type": "string"},
        "on": {"type": "string", "format": "date"},
    },
    "required": ["amount", "to"],
}


def tool(name: str, parameters: Json) -> Json:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


TOOLS = [tool("get_weather", WEATHER)]


def ask(prompt: str, tools: list[Json] = TOOLS, **kw: Any) -> Json:
    body = {"model": "demo-misbehave", "messages": [{"role": "user", "content": prompt}]}
    message: Json = asyncio.run(DEMO.chat({**body, "tools": tools, **kw}))["choices"][0]["message"]
    return message


def guarded(prompt: str, tools: list[Json] = TOOLS, **guard: Any) -> tuple[Settled, Json]:
    """The demo's answer through the guard's settle(), repairs asked of the demo itself; also
    the first answer."""
    config = ToolGuardConfig(**guard)
    catalog = ToolCatalog.from_request(
        tools, config.rules, config.clean, undeclared=config.undeclared_parameters
    )
    body = {
        "model": "demo-misbehave",
        "messages": [{"role": "user", "content": prompt}],
        "tools": tools,
    }

    async def ask_again(extra: list[Json]) -> Json:
        reply = await DEMO.chat({**body, "messages": [*body["messages"], *extra]})
        return dict(reply["choices"][0]["message"])

    async def run() -> tuple[Settled, Json]:
        first = (await DEMO.chat(body))["choices"][0]["message"]
        return await settle(first, catalog, None, config, ask_again), first

    return asyncio.run(run())


def call_of(message: Json) -> tuple[str, str]:
    [call] = message["tool_calls"]
    return call["function"]["name"], call["function"]["arguments"]


@pytest.mark.parametrize(
    ("prompt", "kind", "seen"),
    [
        ("Weather in Paris?", "unknown_tool", "get_weather_v2"),
        ("Weather in Paris? hallucinate", "unknown_tool", "get_weather_v2"),
        ("Weather in Paris? wrong-type", "schema", "not of type 'string'"),
        ("Weather in Paris? missing-field", "schema", "'city' is a required property"),
        ("Weather in Paris? extra-field", "undeclared_parameter", "'note' is not a parameter"),
        ("Weather in Paris? bad-value", "schema", "'other' is not one of"),
        ("Weather in Paris? bad-json", "invalid_json", "not valid JSON"),
        ("Weather in Paris? days=30", "schema", "30 is greater than the maximum of 7"),
    ],
)
def test_each_mistake_is_caught_and_the_repair_fixes_it(prompt: str, kind: str, seen: str) -> None:
    settled, first = guarded(prompt)
    assert first["tool_calls"], "the mistake is a tool call"
    assert [p.kind for p in settled.found] == [kind]
    assert seen in str(settled.found[0])
    assert settled.outcome == "repaired" and settled.repairs == 1
    name, arguments = call_of(settled.message)
    assert name == "get_weather" and json.loads(arguments)["city"] == "Weather in Paris?"


def test_a_value_set_by_hand_survives_the_mistake_made_on_it() -> None:
    assert call_of(ask("Weather? city=Paris wrong-type")) == ("get_weather", '{"city":42}')
    settled, _ = guarded("Weather? city=Paris wrong-type")
    assert settled.outcome == "repaired"
    assert json.loads(call_of(settled.message)[1]) == {"city": "Paris"}


def test_the_same_request_makes_the_same_mistake() -> None:
    assert ask("Weather in Paris? wrong-type") == ask("Weather in Paris? wrong-type")
    assert call_of(ask("Weather in Paris? wrong-type")) == ("get_weather", '{"city":42}')


@pytest.mark.parametrize(
    ("mistake", "schema", "seen"),
    [
        ("wrong-type", {"type": "number"}, '"lots"'),
        ("wrong-type", {"type": "boolean"}, '"maybe"'),
        ("bad-value", {"type": "string", "pattern": "^[A-Z]{3}$"}, '"?"'),
        ("bad-value", {"type": "string", "format": "date"}, '"not-a-date"'),
        ("bad-value", {"type": "integer", "exclusiveMinimum": 0}, "0"),
        ("bad-value", {"type": "string", "maxLength": 2}, '"xxx"'),
    ],
)
def test_mistakes_follow_the_schema(mistake: str, schema: Json, seen: str) -> None:
    tools = [tool("f", {"type": "object", "properties": {"x": schema}, "required": ["x"]})]
    name, arguments = call_of(ask(f"go {mistake}", tools))
    assert name == "f" and arguments == '{"x":' + seen + "}"
    settled, _ = guarded(f"go {mistake}", tools)
    assert settled.outcome == "repaired"


def test_a_mistake_no_tool_can_carry_is_said_in_text() -> None:
    tools = [tool("ping", {"type": "object"})]
    message = ask("ping missing-field", tools)
    assert "tool_calls" not in message
    assert "No declared tool can show 'missing-field'" in message["content"]


def test_the_first_tool_that_can_carry_it_is_used_unless_tool_choice_names_one() -> None:
    tools = [tool("ping", {"type": "object"}), *TOOLS]
    assert call_of(ask("Paris missing-field", tools))[0] == "get_weather"
    named = {"type": "function", "function": {"name": "ping"}}
    assert "tool_calls" not in ask("Paris missing-field", tools, tool_choice=named)


@pytest.mark.parametrize(
    ("rule", "prompt", "fixed"),
    [
        ({"amount": {"maximum": 1000}}, "amount=5000 to=Bob", {"amount": 1000, "to": "Bob"}),
        ({"amount": {"minimum": 0.01}}, "amount=0 to=Bob", {"amount": 0.01, "to": "Bob"}),
        (
            {"currency": {"enum": ["EUR", "USD"]}},
            "amount=10 to=Bob currency=GBP",
            {"amount": 10, "to": "Bob", "currency": "EUR"},
        ),
        (
            {"iban": {"pattern": "^[A-Z]{2}[0-9]{2}$"}},
            'amount=10 to="Bob Smith" iban=x',
            {"amount": 10, "to": "Bob Smith", "iban": "AA00"},
        ),
    ],
)
def test_a_business_rule_set_by_hand_is_broken_then_repaired(
    rule: Json, prompt: str, fixed: Json
) -> None:
    tools = [tool("transfer", TRANSFER)]
    settled, first = guarded(prompt, tools, rules={"transfer": {"arguments": rule}})
    assert [p.kind for p in settled.found] == ["rule"]
    assert first["tool_calls"][0]["function"]["name"] == "transfer", "made as set"
    assert settled.outcome == "repaired"
    assert json.loads(call_of(settled.message)[1]) == fixed


def test_a_date_in_the_past_is_moved_to_today() -> None:
    tools = [tool("transfer", TRANSFER)]
    rules = {"transfer": {"arguments": {"on": {"not_in_past": True}}}}
    settled, _ = guarded("amount=10 to=Bob on=2020-01-01", tools, rules=rules)
    assert settled.outcome == "repaired"
    assert json.loads(call_of(settled.message)[1])["on"] >= "2025-01-01"


@pytest.mark.parametrize("on_failure", ["strip", "pass", "error"])
def test_stubborn_repeats_its_mistake_and_the_policy_applies(on_failure: str) -> None:
    settled, first = guarded("Paris wrong-type stubborn", on_failure=on_failure)
    assert settled.repairs == 2
    assert settled.outcome == {"strip": "stripped", "pass": "passed", "error": "failed"}[on_failure]
    if on_failure == "pass":
        assert call_of(settled.message) == call_of(first)


def test_chatty_answers_the_feedback_in_prose_and_the_repair_fails() -> None:
    settled, _ = guarded("Paris bad-json chatty")
    assert settled.outcome == "stripped" and settled.repairs == 1
    assert CHATTY_TEXT not in json.dumps(settled.message)


def test_repeat_calls_again_after_each_tool_result() -> None:
    first = ask("Paris repeat")
    messages: list[Json] = [{"role": "user", "content": "Paris repeat"}]
    for _ in range(3):
        messages += [first, {"role": "tool", "tool_call_id": "x", "content": "18 C"}]
        again = asyncio.run(
            DEMO.chat({"model": "demo-misbehave", "messages": messages, "tools": TOOLS})
        )
        assert call_of(again["choices"][0]["message"]) == call_of(first)


def test_after_a_tool_result_other_mistakes_answer_from_it() -> None:
    messages = [
        {"role": "user", "content": "Paris wrong-type"},
        ask("Paris wrong-type"),
        {"role": "tool", "tool_call_id": "x", "content": "18 C"},
    ]
    reply = asyncio.run(
        DEMO.chat({"model": "demo-misbehave", "messages": messages, "tools": TOOLS})
    )
    assert reply["choices"][0]["message"]["content"].endswith("The tool returned: 18 C")


def test_without_tools_it_is_the_demo_model() -> None:
    reply = asyncio.run(
        DEMO.chat({"model": "demo-misbehave", "messages": [{"role": "user", "content": "hi"}]})
    )
    assert reply["choices"][0]["message"]["content"].endswith("You asked: hi")
    assert call_of(ask("Paris"))[0] == "get_weather_v2"
    assert "tool_calls" not in ask("Paris", tool_choice="none")
