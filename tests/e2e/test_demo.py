"""Every feature offline: the shipped config.yaml with no provider key, driven by the OpenAI SDK
and LangChain over real sockets. Structured output (`parse`, `with_structured_output` by JSON
Schema and by function calling), `n` choices plain and streamed, forced tool calls whose
arguments fit the tool's schema, the demo-auto alias sending a trivial and a hard prompt to
different demo tiers (the answer says which), and `auto` without OPENAI_API_KEY saying so."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel, Field

from gateway.testing.harness.inprocess import GatewayServer
from tests.clients import sdk_client
from tests.e2e.helpers import request

TRIVIAL = "hi, how are you?"
HARD = (
    "Prove step by step that the square root of 2 is irrational, then analyse and compare two "
    "different proofs, and derive a general rule for square roots of non-square integers."
)


class Step(BaseModel):
    explanation: str
    output: str


class MathAnswer(BaseModel):
    """A worked answer."""

    steps: list[Step] = Field(min_length=1)
    final_answer: str
    confidence: float = Field(ge=0, le=1)
    kind: Literal["proof", "calculation"]
    note: str | None = None


def client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "anything-in-anonymous-mode")


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def test_parse_returns_a_valid_pydantic_instance(shipped_gateway: GatewayServer) -> None:
    completion = client(shipped_gateway).chat.completions.parse(
        model="demo",
        messages=ask("Is the square root of 2 irrational?"),
        response_format=MathAnswer,
    )
    message = completion.choices[0].message
    assert isinstance(message.parsed, MathAnswer) and message.refusal is None
    assert message.parsed.steps and 0 <= message.parsed.confidence <= 1
    assert completion.system_fingerprint == "demo"


def test_json_object_is_a_labelled_json_object(shipped_gateway: GatewayServer) -> None:
    reply = client(shipped_gateway).chat.completions.create(
        model="demo", messages=ask("list three colours"), response_format={"type": "json_object"}
    )
    content = json.loads(reply.choices[0].message.content or "")
    assert content["you_asked"] == "list three colours" and "demo model" in content["demo"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_n_gives_n_distinct_choices(shipped_gateway: GatewayServer, streamed: bool) -> None:
    kw: Any = {"model": "demo", "messages": ask("name a colour"), "n": 3}
    texts: dict[int, str] = {}
    finishes: dict[int, str | None] = {}
    if streamed:
        for chunk in client(shipped_gateway).chat.completions.create(**kw, stream=True):
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
    else:
        reply = client(shipped_gateway).chat.completions.create(**kw)
        texts = {c.index: c.message.content or "" for c in reply.choices}
        finishes = {c.index: c.finish_reason for c in reply.choices}
    assert sorted(texts) == [0, 1, 2] and finishes == {0: "stop", 1: "stop", 2: "stop"}
    assert len(set(texts.values())) == 3
    assert all("demo model" in t and t.endswith("You asked: name a colour") for t in texts.values())


def test_n_structured_choices_are_each_valid(shipped_gateway: GatewayServer) -> None:
    completion = client(shipped_gateway).chat.completions.parse(
        model="demo", messages=ask("prove it"), response_format=MathAnswer, n=2
    )
    parsed = [c.message.parsed for c in completion.choices]
    assert len(parsed) == 2 and all(isinstance(p, MathAnswer) for p in parsed)
    assert parsed[0] != parsed[1]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_forced_tool_gets_arguments_valid_for_its_schema(
    shipped_gateway: GatewayServer, streamed: bool
) -> None:
    tools: Any = [
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
        {
            "type": "function",
            "function": {"name": "answer", "parameters": MathAnswer.model_json_schema()},
        },
    ]
    kw: Any = {
        "model": "demo",
        "messages": ask("prove it"),
        "tools": tools,
        "tool_choice": {"type": "function", "function": {"name": "answer"}},
    }
    if streamed:
        arguments, names = "", set()
        for chunk in client(shipped_gateway).chat.completions.create(**kw, stream=True):
            for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                names.add(call.function and call.function.name)
                arguments += (call.function and call.function.arguments) or ""
        assert "answer" in names
    else:
        reply = client(shipped_gateway).chat.completions.create(**kw)
        [call] = reply.choices[0].message.tool_calls or []
        assert reply.choices[0].finish_reason == "tool_calls"
        assert call.type == "function" and call.function.name == "answer"
        arguments = call.function.arguments
    MathAnswer.model_validate_json(arguments)


def _route(raw: Any) -> dict[str, str]:
    return dict(part.split("=", 1) for part in raw.headers["x-gateway-route"].split("; "))


def test_demo_auto_sends_a_trivial_and_a_hard_prompt_to_different_tiers(
    shipped_gateway: GatewayServer,
) -> None:
    answers = {}
    for prompt in (TRIVIAL, HARD):
        raw = client(shipped_gateway).chat.completions.with_raw_response.create(
            model="demo-auto", messages=ask(prompt)
        )
        answers[prompt] = (_route(raw), raw.parse())
    (cheap, cheap_reply), (strong, strong_reply) = answers[TRIVIAL], answers[HARD]
    assert (cheap["alias"], cheap["model"], cheap["tier"]) == ("demo-auto", "demo-cheap", "0")
    assert (strong["model"], strong["tier"]) == ("demo-strong", "1")
    assert cheap_reply.model == "demo-cheap" and strong_reply.model == "demo-strong"
    assert (cheap_reply.choices[0].message.content or "").startswith("[demo model demo-cheap:")
    assert (strong_reply.choices[0].message.content or "").startswith("[demo model demo-strong:")
    metrics = asyncio.run(request("GET", shipped_gateway.url + "/metrics")).text
    assert 'gateway_cost_total{model="demo-cheap"}' in metrics
    assert 'gateway_saved_cost_total{by="routing",model="demo-auto"}' in metrics


def test_demo_auto_is_listed_and_auto_is_not(shipped_gateway: GatewayServer) -> None:
    listed = {m.id for m in client(shipped_gateway).models.list()}
    assert {"demo-auto", "demo-cheap", "demo-strong"} <= listed and "auto" not in listed


def test_auto_without_a_key_names_the_unset_variable(shipped_gateway: GatewayServer) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(shipped_gateway).chat.completions.create(model="auto", messages=ask(TRIVIAL))
    message = info.value.message
    assert "routed alias 'auto'" in message and "OPENAI_API_KEY is not set" in message
    assert "gpt-4o-mini and gpt-4o" in message and "Routed aliases served: demo-auto" in message


# --- LangChain (slow: importing it takes seconds) ----------------------------------------------


def _langchain(gw: GatewayServer) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="demo",
        base_url=gw.url + "/v1",
        api_key="k",  # type: ignore[arg-type]
        max_retries=0,
    )


@pytest.mark.parametrize("method", ["default", "function_calling", "json_schema"])
def test_langchain_with_structured_output(shipped_gateway: GatewayServer, method: str) -> None:
    llm = _langchain(shipped_gateway)
    kw = {} if method == "default" else {"method": method}
    question = "Is the square root of 2 rational?"
    parsed = llm.with_structured_output(MathAnswer, **kw).invoke(question)
    assert isinstance(parsed, MathAnswer) and parsed.final_answer == question
