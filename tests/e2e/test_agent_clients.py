"""Real client libraries through the gateway, each in its default mode, against the scripted
fake upstream: the OpenAI Agents SDK (Responses API), LangChain's ChatOpenAI with
`use_responses_api=True`, and llama-index's OpenAILike (legacy /v1/completions by default)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.inprocess import GatewayServer
from tests.clients import sdk_client
from tests.e2e.helpers import upstream_requests

Json = dict[str, Any]
MODEL = "fake-model"
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
SUNNY = "It is sunny in Paris, 24 degrees."


def script(fake: FakeUpstream, *replies: Json) -> None:
    """The fake upstream answers the n-th assistant turn with replies[n] (the clients here
    cannot send the per-request `fake` knobs)."""
    fake.defaults = Knobs.model_validate({"replies": list(replies)})


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}, 24 degrees"


def chat_requests(fake: FakeUpstream) -> list[Json]:
    return [r["body"] for r in upstream_requests(fake)]


# --- the OpenAI Agents SDK ----------------------------------------------------------------------


def _agent(gw: GatewayServer, client: Any, **more: Any) -> Any:
    from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # no traces sent to OpenAI
    return Agent(
        name="weather",
        instructions="You answer weather questions.",
        tools=[function_tool(get_weather)],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        **more,
    )


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_the_agents_sdk_runs_an_agent_with_a_function_tool(
    gw: GatewayServer, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    from agents import Runner
    from openai import AsyncOpenAI

    script(fake_upstream, {"tool_calls": [WEATHER_CALL]}, {"content": SUNNY})
    async with AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0) as client:
        agent = _agent(gw, client)
        if streamed:
            run = Runner.run_streamed(agent, "What is the weather in Paris?")
            kinds = [event.type async for event in run.stream_events()]
            assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
            final, last_id = run.final_output, run.last_response_id
        else:
            result = await Runner.run(agent, "What is the weather in Paris?")
            final, last_id = result.final_output, result.last_response_id
    assert final == SUNNY
    assert last_id is not None and last_id.startswith("resp_")
    first, second = chat_requests(fake_upstream)
    assert first["messages"][0] == {"role": "system", "content": "You answer weather questions."}
    assert first["tools"][0]["function"]["name"] == "get_weather"
    call = second["messages"][-2]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "sunny in Paris, 24 degrees",
    }


async def test_the_agents_sdk_continues_with_previous_response_id(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    from agents import Runner
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0) as client:
        agent = _agent(gw, client)
        first = await Runner.run(agent, "My name is Ann.")
        again = await Runner.run(agent, "Who am I?", previous_response_id=first.last_response_id)
        history = await Runner.run(
            agent, [*first.to_input_list(), {"role": "user", "content": "Hm?"}]
        )
    assert again.final_output == "Echo: Who am I?"
    assert history.final_output == "Echo: Hm?"
    continued, replayed = chat_requests(fake_upstream)[1:]
    for body in (continued, replayed):
        assert body["messages"][1:3] == [
            {"role": "user", "content": "My name is Ann."},
            {"role": "assistant", "content": "Echo: My name is Ann."},
        ]


async def test_the_agents_sdk_gets_a_structured_output(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    from agents import Runner
    from openai import AsyncOpenAI

    class Forecast(BaseModel):
        city: str
        sunny: bool

    script(fake_upstream, {"content": json.dumps({"city": "Paris", "sunny": True})})
    async with AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0) as client:
        result = await Runner.run(_agent(gw, client, output_type=Forecast), "Paris?")
    assert result.final_output == Forecast(city="Paris", sunny=True)
    [sent] = chat_requests(fake_upstream)
    assert sent["response_format"]["type"] == "json_schema"


async def test_the_agents_sdk_model_settings_are_accepted(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """What ModelSettings adds to the request (truncation, store, reasoning, metadata...)."""
    from agents import ModelSettings, Runner
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    settings = ModelSettings(
        temperature=0.2,
        top_p=0.9,
        tool_choice="auto",
        parallel_tool_calls=True,
        truncation="auto",
        max_tokens=200,
        store=True,
        metadata={"ticket": "42"},
        reasoning=Reasoning(effort="low"),
    )
    script(fake_upstream, {"tool_calls": [WEATHER_CALL]}, {"content": SUNNY})
    async with AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0) as client:
        result = await Runner.run(_agent(gw, client, model_settings=settings), "Paris?")
    assert result.final_output == SUNNY
    first = chat_requests(fake_upstream)[0]
    assert first["temperature"] == 0.2 and first["top_p"] == 0.9
    assert first["max_completion_tokens"] == 200 and first["reasoning_effort"] == "low"
    assert first["tool_choice"] == "auto" and first["parallel_tool_calls"] is True
    assert "metadata" not in first and "truncation" not in first


# --- LangChain ----------------------------------------------------------------------------------


def _langchain(gw: GatewayServer, **more: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=MODEL,
        base_url=gw.url + "/v1",
        api_key="k",  # type: ignore[arg-type]
        use_responses_api=True,
        max_retries=0,
        **more,
    )


def test_langchain_plain(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    from langchain_core.messages import HumanMessage, SystemMessage

    answer = _langchain(gw).invoke([SystemMessage("Be brief."), HumanMessage("Hello there")])
    assert answer.text == "Echo: Hello there"
    assert answer.usage_metadata["input_tokens"] == 10
    assert answer.usage_metadata["output_tokens"] == 5
    assert answer.response_metadata["id"].startswith("resp_")
    [sent] = chat_requests(fake_upstream)
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]


def test_langchain_with_a_bound_tool_round_trip(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage

    script(fake_upstream, {"tool_calls": [WEATHER_CALL]}, {"content": SUNNY})
    llm = _langchain(gw).bind_tools([get_weather])
    messages: list[Any] = [HumanMessage("Weather in Paris?")]
    ai = llm.invoke(messages)
    [call] = ai.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"}
    messages += [ai, ToolMessage(get_weather("Paris"), tool_call_id=call["id"])]
    assert llm.invoke(messages).text == SUNNY
    sent = chat_requests(fake_upstream)[-1]["messages"]
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "sunny in Paris, 24 degrees",
    }


def test_langchain_streams_text_and_a_tool_call(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    llm = _langchain(gw)
    chunks = list(llm.stream("one two three"))
    assert len(chunks) > 2
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert whole.text == "Echo: one two three"
    assert whole.usage_metadata["total_tokens"] == 15

    script(fake_upstream, {"tool_calls": [WEATHER_CALL]})
    calls = list(llm.bind_tools([get_weather]).stream("Weather in Paris?"))
    merged = calls[0]
    for chunk in calls[1:]:
        merged += chunk
    [call] = merged.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"}


def test_langchain_with_structured_output(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    class City(BaseModel):
        """A city."""

        name: str
        population: int

    script(fake_upstream, {"content": json.dumps({"name": "Paris", "population": 2100000})})
    parsed = _langchain(gw).with_structured_output(City).invoke("The largest city of France?")
    assert parsed == City(name="Paris", population=2100000)
    [sent] = chat_requests(fake_upstream)
    assert sent["response_format"]["json_schema"]["name"] == "City"


def test_langchain_with_previous_response_id_and_settings(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    from langchain_core.messages import HumanMessage

    llm = _langchain(
        gw,
        use_previous_response_id=True,
        reasoning={"effort": "low", "summary": "auto"},
        include=["reasoning.encrypted_content"],
        temperature=0.3,
    )
    messages: list[Any] = [HumanMessage("I am Ann.")]
    ai = llm.invoke(messages)
    again = llm.invoke([*messages, ai, HumanMessage("Who am I?")])
    assert again.text == "Echo: Who am I?"
    sent = chat_requests(fake_upstream)[-1]
    assert sent["messages"] == [
        {"role": "user", "content": "I am Ann."},
        {"role": "assistant", "content": "Echo: I am Ann."},
        {"role": "user", "content": "Who am I?"},
    ]
    assert sent["reasoning_effort"] == "low" and sent["temperature"] == 0.3
    # LangChain sent only the new message; the earlier turn came from the stored response.
    stored = sdk_client(gw.url).responses.input_items.list(again.response_metadata["id"])
    assert [item.content[0].text for item in stored.data] == ["Who am I?"]


# --- llama-index ----------------------------------------------------------------------------------


def _llama(gw: GatewayServer, **more: Any) -> Any:
    # Installed with --no-deps (tests/requirements-no-deps.txt): its metadata caps openai < 3.
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(model=MODEL, api_base=gw.url + "/v1", api_key="k", max_retries=0, **more)


def test_llama_index_openai_like_defaults_use_legacy_completions(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    from llama_index.core.llms import ChatMessage

    llm = _llama(gw)
    assert llm.complete("Say hi").text == "Echo: Say hi"
    answer = llm.chat([ChatMessage(role="user", content="Say hi")])
    assert answer.message.content == "Echo: user: Say hi\nassistant: "
    streamed = "".join(piece.delta or "" for piece in llm.stream_complete("one two three"))
    assert streamed == "Echo: one two three"
    received = [r["path"] for r in fake_upstream.received]
    assert received == ["/v1/chat/completions"] * 3, "translated to chat (no native upstream)"
    prompts = [body["messages"][-1]["content"] for body in chat_requests(fake_upstream)]
    assert prompts == ["Say hi", "user: Say hi\nassistant: ", "one two three"]


def test_llama_index_as_a_chat_model(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    from llama_index.core.llms import ChatMessage

    llm = _llama(gw, is_chat_model=True)
    answer = llm.chat([ChatMessage(role="user", content="Say hi")])
    assert answer.message.content == "Echo: Say hi"
    assert [r["path"] for r in fake_upstream.received] == ["/v1/chat/completions"]
