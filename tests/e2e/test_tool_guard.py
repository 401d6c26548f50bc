"""The tool-call guard end to end, with the OpenAI SDK and the fake upstream scripted to
hallucinate tools, send bad arguments, fix them on feedback or refuse to, or answer the
feedback with prose, plain and streamed, chat completions and the Responses API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.guard.repair import STRIPPED_TEXT
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.chat import function_tool
from tests.clients import sdk_client
from tests.e2e.helpers import request, upstream_requests
from tests.e2e.responses_client import Responses, function_calls, output_text
from tests.e2e.sdk import Sdk

Json = dict[str, Any]
TRANSFER_ARGS = {
    "amount": {"type": "number", "minimum": 0},
    "to": {"type": "string"},
    "currency": {"type": "string", "enum": ["EUR", "USD"]},
    "on": {"type": "string", "format": "date"},
}
TOOLS = [
    function_tool("transfer", TRANSFER_ARGS, ["amount", "to"], additionalProperties=False),
    function_tool("balance", {}),
]
GOOD = {"name": "transfer", "arguments": {"amount": 10, "to": "Bob", "currency": "EUR"}}
HALLUCINATED = {"name": "transfer_money", "arguments": {"amount": 10, "to": "Bob"}}
BAD_ARGS = {"name": "transfer", "arguments": {"amount": "lots", "to": "Bob", "currency": "GBP"}}


def ask(sdk: Sdk, replies: list[Json], streamed: bool, **kw: Any) -> tuple[Any, list[Json]]:
    """(content, tool calls as plain dicts) of one turn whose upstream answers are scripted."""
    call = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "Send Bob 10 euros."}],
        "tools": TOOLS,
        "extra_body": {"fake": {"replies": replies}},
        **kw,
    }
    if not streamed:
        message = sdk.chat(**call).choices[0].message
        calls = [c.model_dump() for c in message.tool_calls or []]
        return message.content, [{"name": c["function"]["name"], **c} for c in calls]
    result = sdk.stream(**call)
    assert result.error is None, result.error
    text = "".join(c.choices[0].delta.content or "" for c in result.chunks if c.choices)
    calls: dict[int, Json] = {}
    for chunk in result.chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                calls[delta.index] = {
                    "name": delta.function.name,
                    "id": delta.id,
                    "function": {"arguments": delta.function.arguments},
                }
    return text or None, [calls[i] for i in sorted(calls)]


def args(call: Json) -> Json:
    import json

    parsed: Json = json.loads(call["function"]["arguments"])
    return parsed


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_valid_call_passes_untouched(sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool):
    _, calls = ask(sdk, [{"tool_calls": [GOOD]}], streamed)
    assert [c["name"] for c in calls] == ["transfer"]
    assert args(calls[0]) == GOOD["arguments"]
    assert len(upstream_requests(fake_upstream)) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("bad", [HALLUCINATED, BAD_ARGS], ids=["hallucinated", "bad-arguments"])
def test_an_invalid_call_is_repaired_with_the_model(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool, bad: Json
) -> None:
    _, calls = ask(sdk, [{"tool_calls": [bad]}, {"tool_calls": [GOOD]}], streamed)
    assert [c["name"] for c in calls] == ["transfer"] and args(calls[0]) == GOOD["arguments"]
    _, repair = upstream_requests(fake_upstream)
    feedback = repair["body"]["messages"][-1]
    assert feedback["role"] == "tool"
    assert feedback["tool_call_id"] == repair["body"]["messages"][-2]["tool_calls"][0]["id"]
    if bad is HALLUCINATED:
        assert "'transfer_money' does not exist" in feedback["content"]
        assert "transfer" in feedback["content"]
    else:
        assert "amount" in feedback["content"] and "GBP" in feedback["content"]
    assert repair["body"].get("stream") is not True, "repairs are plain calls"


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_model_that_will_not_fix_it_has_the_call_stripped(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    content, calls = ask(sdk, [{"tool_calls": [HALLUCINATED]}], streamed)
    assert calls == [], "the client never sees an undeclared tool"
    assert content and "valid tool call" in content
    assert len(upstream_requests(fake_upstream)) == 3, "the answer and two repair attempts"


def test_only_the_bad_call_of_parallel_calls_is_stripped(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    balance = {"name": "balance", "arguments": {}}
    _, calls = ask(sdk, [{"tool_calls": [balance, HALLUCINATED]}], streamed=False)
    assert [c["name"] for c in calls] == ["balance"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_cleaning_fixes_what_is_deterministic_without_a_repair(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    sloppy = {
        "name": "transfer",
        "arguments": {"amount": " 12.50 ", "to": "Bob", "on": "Jan 5, 2030"},
    }
    _, calls = ask(sdk, [{"tool_calls": [sloppy]}], streamed)
    assert args(calls[0]) == {"amount": 12.5, "to": "Bob", "on": "2030-01-05"}
    assert len(upstream_requests(fake_upstream)) == 1


def test_streamed_content_still_flows_before_the_held_calls(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    content, calls = ask(sdk, [{"content": "Let me do that.", "tool_calls": [GOOD]}], True)
    assert content == "Let me do that." and [c["name"] for c in calls] == ["transfer"]


def test_tool_choice_required_is_enforced(sdk: Sdk, fake_upstream: FakeUpstream) -> None:
    _, calls = ask(
        sdk,
        [{"content": "I'd rather chat."}, {"tool_calls": [GOOD]}],
        False,
        tool_choice="required",
    )
    assert [c["name"] for c in calls] == ["transfer"]
    repair = upstream_requests(fake_upstream)[-1]["body"]["messages"][-1]
    assert repair["role"] == "user" and "required" in repair["content"]


def test_headers_and_metrics_say_what_happened(gw: GatewayServer, fake_upstream: FakeUpstream):
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "Send Bob 10 euros."}],
        "tools": TOOLS,
        "fake": {"replies": [{"tool_calls": [BAD_ARGS]}, {"tool_calls": [GOOD]}]},
    }
    resp = asyncio.run(request("POST", gw.url + "/v1/chat/completions", body=body))
    assert resp.headers["x-gateway-tool-guard"] == "repaired"
    text = asyncio.run(request("GET", gw.url + "/metrics")).text
    assert 'gateway_tool_calls_total{model="fake-model",outcome="repaired"}' in text
    assert (
        'gateway_guard_tokens_total{direction="input",model="fake-model",purpose="repair"}' in text
    )


def tool_guard(thread: ServerThread, fake: FakeUpstream, **tools: Any) -> Iterator[GatewayServer]:
    with running_gateway(thread, settings_for(fake.url, {"guard": {"tools": tools}})) as server:
        yield server


@pytest.fixture(scope="module")
def pass_gw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    yield from tool_guard(server_thread, fake, on_failure="pass", repair_attempts=1)


@pytest.fixture(scope="module")
def error_gw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    yield from tool_guard(server_thread, fake, on_failure="error", repair_attempts=0)


def _client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "k")


def _raw(gw: GatewayServer, replies: list[Json], question: str = "x") -> Any:
    """The raw SDK response to `question` with TOOLS, the fake upstream answering `replies`
    (the first answer, then each repair's)."""
    return _client(gw).chat.completions.with_raw_response.create(
        model="fake-model",
        messages=[{"role": "user", "content": question}],
        tools=TOOLS,
        extra_body={"fake": {"replies": replies}},
    )


def test_the_pass_policy_forwards_with_a_warning(
    pass_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = _raw(pass_gw, [{"tool_calls": [HALLUCINATED]}])
    assert raw.headers["x-gateway-tool-guard"] == "passed"
    assert "transfer_money" in raw.headers["x-gateway-tool-problems"]
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "transfer_money"


def test_the_error_policy_answers_502(error_gw: GatewayServer, fake_upstream: FakeUpstream):
    with pytest.raises(openai.APIStatusError) as info:
        _client(error_gw).chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "x"}],
            tools=TOOLS,
            extra_body={"fake": {"replies": [{"tool_calls": [BAD_ARGS]}]}},
        )
    assert info.value.status_code == 502
    assert info.value.code == "invalid_tool_call" and "GBP" in info.value.message


def test_each_repair_carries_the_earlier_attempts(sdk: Sdk, fake_upstream: FakeUpstream) -> None:
    wrong_type = {"name": "transfer", "arguments": {"amount": "ten", "to": "Bob"}}
    _, calls = ask(
        sdk,
        [{"tool_calls": [HALLUCINATED]}, {"tool_calls": [wrong_type]}, {"tool_calls": [GOOD]}],
        False,
    )
    assert [c["name"] for c in calls] == ["transfer"] and args(calls[0]) == GOOD["arguments"]
    last = upstream_requests(fake_upstream)[-1]["body"]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "tool"]


# --- a repair answered without a tool call --------------------------------------------------------
PROSE = "Sorry about that! I will be more careful with the tool names."
ECHO = (  # what a model that parrots its last message sends back: the guard's own feedback
    "Error, the call was not executed: tool 'transfer_money' does not exist (did you mean "
    "'transfer'?); available tools: transfer, balance. Send the call again, corrected."
)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("reply", [PROSE, ECHO], ids=["prose", "echo"])
def test_a_repair_answered_with_text_is_a_failed_repair(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool, reply: str
) -> None:
    content, calls = ask(sdk, [{"tool_calls": [HALLUCINATED]}, {"content": reply}], streamed)
    assert calls == [] and content == STRIPPED_TEXT
    assert len(upstream_requests(fake_upstream)) == 2, "no call to judge: no more repairs"


def test_a_failed_text_repair_is_reported_as_stripped(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = _raw(gw, [{"tool_calls": [BAD_ARGS]}, {"content": ECHO}], "Send Bob 10 euros.")
    assert raw.headers["x-gateway-tool-guard"] == "stripped"
    message = raw.parse().choices[0]
    assert message.message.content == STRIPPED_TEXT and message.finish_reason == "stop"


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_the_first_answers_text_stays_and_the_repairs_prose_never_comes(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    first = {"content": "Let me do that.", "tool_calls": [BAD_ARGS]}
    content, calls = ask(sdk, [first, {"content": PROSE}], streamed)
    assert content == "Let me do that." and calls == []
    fixed = {"content": "Sorry, here is the corrected call.", "tool_calls": [GOOD]}
    content, calls = ask(sdk, [first, fixed], streamed)
    assert content == "Let me do that." and args(calls[0]) == GOOD["arguments"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_successful_repairs_prose_is_not_sent(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    fixed = {"content": "Sorry, here is the corrected call.", "tool_calls": [GOOD]}
    content, calls = ask(sdk, [{"tool_calls": [HALLUCINATED]}, fixed], streamed)
    assert not content and [c["name"] for c in calls] == ["transfer"]


def test_under_tool_choice_none_an_answer_without_calls_is_the_fix(
    sdk: Sdk, fake_upstream: FakeUpstream
) -> None:
    content, calls = ask(
        sdk,
        [{"tool_calls": [GOOD]}, {"content": "Done: 10 euros to Bob."}],
        False,
        tool_choice="none",
    )
    assert content == "Done: 10 euros to Bob." and calls == []


def test_pass_forwards_the_last_calls_made_not_the_repairs_text(
    pass_gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = _raw(pass_gw, [{"tool_calls": [HALLUCINATED]}, {"content": ECHO}])
    assert raw.headers["x-gateway-tool-guard"] == "passed"
    message = raw.parse().choices[0].message
    assert message.content is None
    assert [c.function.name for c in message.tool_calls or []] == ["transfer_money"]


@pytest.fixture(scope="module")
def error_after_repair_gw(
    server_thread: ServerThread, fake: FakeUpstream
) -> Iterator[GatewayServer]:
    yield from tool_guard(server_thread, fake, on_failure="error", repair_attempts=2)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_error_answers_502_when_the_repair_is_text(
    error_after_repair_gw: GatewayServer, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    with pytest.raises(openai.APIError) as info:
        stream = _client(error_after_repair_gw).chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "x"}],
            tools=TOOLS,
            stream=streamed,
            extra_body={"fake": {"replies": [{"tool_calls": [BAD_ARGS]}, {"content": ECHO}]}},
        )
        for _ in stream if streamed else ():
            pass
    assert getattr(info.value, "code", None) == "invalid_tool_call"
    assert "GBP" in info.value.message and "not executed" not in info.value.message


RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_the_responses_api_never_gets_the_repairs_text(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    kw: Any = {
        "model": "fake-model",
        "input": "Send Bob 10 euros.",
        "tools": RESPONSES_TOOLS,
        "extra_body": {"fake": {"replies": [{"tool_calls": [HALLUCINATED]}, {"content": ECHO}]}},
    }
    responses = Responses(sdk)
    if streamed:
        [done] = [e for e in responses.stream(**kw) if e.type == "response.completed"]
        response = done.response.model_dump()
    else:
        response, _ = responses.create_raw(**kw)
    assert function_calls(response) == [] and output_text(response) == STRIPPED_TEXT
    fixed = {"content": PROSE, "tool_calls": [GOOD]}
    kw["extra_body"] = {"fake": {"replies": [{"tool_calls": [HALLUCINATED]}, fixed]}}
    response, headers = responses.create_raw(**kw)
    assert headers["x-gateway-tool-guard"] == "repaired"
    assert [c["name"] for c in function_calls(response)] == ["transfer"]
    assert PROSE not in json.dumps(response)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(
    "tool_choice",
    ["none", {"type": "function", "function": {"name": "balance"}}],
    ids=["none", "named"],
)
def test_strip_drops_calls_tool_choice_refuses_even_when_valid(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool, tool_choice: Any
) -> None:
    content, calls = ask(sdk, [{"tool_calls": [GOOD]}], streamed, tool_choice=tool_choice)
    assert calls == [] and content == STRIPPED_TEXT
    echo = {"content": "Your answer does not follow the rules: tool_choice is 'none'."}
    content, calls = ask(sdk, [{"tool_calls": [GOOD]}, echo], streamed, tool_choice="none")
    assert calls == [] and content == STRIPPED_TEXT, "an echo of the feedback is no fix"
