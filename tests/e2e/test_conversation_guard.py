"""The agent-loop guard and context compression, end to end with the OpenAI SDK: what the
upstream receives, and what the client sees."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.guard.compression import SUMMARY_PREFIX
from gateway.guard.summarizer import INSTRUCTION
from gateway.responses.native import items_of
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.chat import long_conversation, repeated_calls
from tests.clients import sdk_client
from tests.e2e.helpers import upstream_requests

Json = dict[str, Any]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def guarded(action: str) -> Json:
    compression = {"enabled": True, "max_turns": 8, "keep_turns": 2, "summarizer_model": "mapped"}
    return {
        "guard": {"loops": {"action": action, "max_identical_calls": 3}, "compression": compression}
    }


@pytest.fixture(scope="module")
def finalize_gw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    with running_gateway(server_thread, settings_for(fake.url, guarded("finalize"))) as gw:
        yield gw


@pytest.fixture(scope="module")
def error_gw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    with running_gateway(server_thread, settings_for(fake.url, guarded("error"))) as gw:
        yield gw


def client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "k", 20)


def looping_history(rounds: int) -> list[Json]:
    weather = {"name": "get_weather", "arguments": {"city": "Paris"}}
    return repeated_calls("Weather in Paris?", weather, "sunny, 21C", rounds)


def test_a_normal_agent_turn_passes_untouched(
    finalize_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = client(finalize_gw).chat.completions.with_raw_response.create(
        model="fake-model", messages=looping_history(1), tools=TOOLS
    )
    assert "x-gateway-loop-stop" not in raw.headers
    assert upstream_requests(fake_upstream)[-1]["body"]["tools"] == TOOLS


def test_identical_calls_are_finalized_with_tools_off(
    finalize_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = client(finalize_gw).chat.completions.with_raw_response.create(
        model="fake-model", messages=looping_history(3), tools=TOOLS, tool_choice="auto"
    )
    assert raw.headers["x-gateway-loop-stop"] == "identical_calls"
    assert raw.parse().choices[0].message.content
    sent = upstream_requests(fake_upstream)[-1]["body"]
    assert "tools" not in sent and "tool_choice" not in sent
    assert "get_weather" in sent["messages"][-1]["content"]
    assert sent["messages"][:7] == looping_history(3), "the history itself is kept"


def test_the_error_policy_answers_400_saying_why(
    error_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(error_gw).chat.completions.create(
            model="fake-model", messages=looping_history(3), tools=TOOLS
        )
    assert info.value.code == "agent_loop_detected"
    assert "get_weather" in info.value.message and "3" in info.value.message
    assert not upstream_requests(fake_upstream), "nothing was sent upstream"


def test_a_long_history_is_summarized_once_then_reused(
    finalize_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    messages = long_conversation(10)
    raw = client(finalize_gw).chat.completions.with_raw_response.create(
        model="fake-model", messages=messages
    )
    assert raw.headers["x-gateway-compression"].startswith("summarized")
    summary_call, main_call = upstream_requests(fake_upstream)
    assert summary_call["body"]["model"] == "upstream-name", "the summarizer model was used"
    assert summary_call["body"]["messages"][0]["content"] == INSTRUCTION
    sent = main_call["body"]["messages"]
    assert sent[0] == messages[0]
    assert sent[1]["role"] == "system" and sent[1]["content"].startswith(SUMMARY_PREFIX)
    assert sent[-1] == messages[-1]
    assert len(sent) < len(messages)

    again = client(finalize_gw).chat.completions.with_raw_response.create(
        model="fake-model", messages=messages
    )
    assert again.headers["x-gateway-compression"].startswith("cached")
    assert len(upstream_requests(fake_upstream)) == 3, "no second summary call"


def test_a_failing_summarizer_keeps_the_last_turns(
    finalize_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.per_model["upstream-name"] = Knobs(status=500)
    messages = long_conversation(12, topic="cubed")  # a prefix never summarized before
    raw = client(finalize_gw).chat.completions.with_raw_response.create(
        model="fake-model", messages=messages
    )
    assert raw.headers["x-gateway-compression"].startswith("failed")
    sent = [r for r in upstream_requests(fake_upstream) if r["body"]["model"] == "fake-model"]
    kept = sent[-1]["body"]["messages"]
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    assert len(kept) <= 1 + 2 + 1, "the system prompt, the last turns, the question"


def test_the_loop_guard_reads_a_responses_conversation(
    finalize_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """The same looping history, sent as Responses input items (function_call and
    function_call_output), is stopped the same way."""
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    raw = client(finalize_gw).responses.with_raw_response.create(
        model="fake-model", input=items_of(looping_history(3)), tools=tools
    )
    assert raw.headers["x-gateway-loop-stop"] == "identical_calls"
    assert raw.parse().output_text
    assert "tools" not in upstream_requests(fake_upstream)[-1]["body"]
