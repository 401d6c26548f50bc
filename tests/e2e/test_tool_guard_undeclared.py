"""Tool calls with parameters their schema never declared, end to end: the OpenAI SDK, the
gateway and the fake upstream scripted to send them, under each `undeclared_parameters`
policy (the default, one set by a model's policy file, and allow), plain and streamed."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.observability.accesslog import AccessLog
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import (
    FAKE_PROVIDER_KEY,
    FAKE_PROVIDER_KEY_ENV,
    TEST_RESILIENCE,
    fake_config,
    settings_for,
)
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.chat import function_tool
from tests.e2e.conftest import SdkFactory
from tests.e2e.helpers import request, settings_from_files, upstream_requests
from tests.e2e.sdk import Sdk

Json = dict[str, Any]
WEATHER_ARGS = {
    "location": {"type": "string"},
    "unit": {"type": "string", "enum": ["Celsius", "Fahrenheit"]},
}
# As most clients write it: properties listed, nothing said about other names.
TOOLS = [
    function_tool("get_weather", WEATHER_ARGS, ["location"]),
    function_tool("open_search", {"q": {"type": "string"}}, additionalProperties=True),
]
GOOD = {"name": "get_weather", "arguments": {"location": "Oslo", "unit": "Celsius"}}
EXTRA = {"name": "get_weather", "arguments": {"location": "Oslo", "unit": "Celsius", "days": 3}}
STRIP_MODEL = "mapped"  # policies/strip.yaml sets `strip` for it


@dataclass
class Logged:
    server: GatewayServer
    sink: io.BytesIO
    log: AccessLog

    def lines(self, thread: ServerThread) -> list[Json]:
        async def flush() -> None:
            self.log.flush()

        thread.call(flush())
        return [json.loads(line) for line in self.sink.getvalue().splitlines()]


@pytest.fixture(scope="module")
def policy_gw(
    server_thread: ServerThread, fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Logged]:
    """Defaults for every model but STRIP_MODEL, whose policy file says `strip`; access log
    into a buffer."""
    strip = {
        "match": {"models": [STRIP_MODEL]},
        "guard": {"tools": {"undeclared_parameters": "strip"}},
    }
    config = {**fake_config(fake.url), **TEST_RESILIENCE}
    directory = tmp_path_factory.mktemp("undeclared")
    environ = {FAKE_PROVIDER_KEY_ENV: FAKE_PROVIDER_KEY}
    settings = settings_from_files(directory, config, {"strip": strip}, environ)
    sink = io.BytesIO()
    log = AccessLog(sink)
    server = server_thread.call(GatewayServer(settings, log).start())
    try:
        yield Logged(server, sink, log)
    finally:
        server_thread.call(server.stop())


@pytest.fixture(scope="module")
def allow_gw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    settings = settings_for(fake.url, {"guard": {"tools": {"undeclared_parameters": "allow"}}})
    with running_gateway(server_thread, settings) as server:
        yield server


def ask(sdk: Sdk, replies: list[Json], streamed: bool, model: str = "fake-model") -> list[Json]:
    """The tool calls (name and parsed arguments) of one turn whose upstream answers are
    scripted."""
    call = {
        "model": model,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": TOOLS,
        "extra_body": {"fake": {"replies": replies}},
    }
    if not streamed:
        message = sdk.chat(**call).choices[0].message
        return [
            {"name": c.function.name, "arguments": json.loads(c.function.arguments)}
            for c in message.tool_calls or []
        ]
    result = sdk.stream(**call)
    assert result.error is None, result.error
    calls: dict[int, Json] = {}
    for chunk in result.chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                # Held until checked: each call arrives whole, in one delta.
                assert delta.index not in calls, "a call in pieces"
                calls[delta.index] = {
                    "name": delta.function.name,
                    "arguments": json.loads(delta.function.arguments),
                }
    return [calls[i] for i in sorted(calls)]


STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])


@STREAMED
def test_by_default_an_undeclared_parameter_goes_back_to_the_model(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    calls = ask(sdk, [{"tool_calls": [EXTRA]}, {"tool_calls": [GOOD]}], streamed)
    assert calls == [GOOD]
    _, repair = upstream_requests(fake_upstream)
    feedback = repair["body"]["messages"][-1]["content"]
    assert "'days' is not a parameter of tool 'get_weather'" in feedback
    assert "location, unit" in feedback


@STREAMED
def test_when_the_model_keeps_it_only_the_parameter_is_dropped(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    calls = ask(sdk, [{"tool_calls": [EXTRA]}], streamed)
    assert calls == [GOOD], "the call stays, without what the tool never declared"
    assert len(upstream_requests(fake_upstream)) == 3, "the answer and two repair attempts"


@STREAMED
def test_a_policy_that_strips_answers_at_once(
    policy_gw: Logged,
    sdk_factory: SdkFactory,
    fake_upstream: FakeUpstream,
    server_thread: ServerThread,
    streamed: bool,
) -> None:
    sdk = sdk_factory(policy_gw.server.url)
    assert ask(sdk, [{"tool_calls": [EXTRA]}], streamed, model=STRIP_MODEL) == [GOOD]
    assert len(upstream_requests(fake_upstream)) == 1
    line = policy_gw.lines(server_thread)[-1]
    assert line["tool_guard"] == "cleaned"
    assert line["tool_cleanings"] == ["undeclared_stripped"]
    text = asyncio.run(request("GET", policy_gw.server.url + "/metrics")).text
    assert (
        f'gateway_tool_call_cleanings_total{{model="{STRIP_MODEL}",reason="undeclared_stripped"}}'
        in text
    )


def test_the_policy_applies_to_its_model_only(
    policy_gw: Logged, sdk_factory: SdkFactory, fake_upstream: FakeUpstream
) -> None:
    sdk = sdk_factory(policy_gw.server.url)
    assert ask(sdk, [{"tool_calls": [EXTRA]}, {"tool_calls": [GOOD]}], False) == [GOOD]
    assert len(upstream_requests(fake_upstream)) == 2, "fake-model: the default, repair"


@STREAMED
def test_allow_passes_them_as_the_model_sent_them(
    allow_gw: GatewayServer, sdk_factory: SdkFactory, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    calls = ask(sdk_factory(allow_gw.url), [{"tool_calls": [EXTRA]}], streamed)
    assert calls == [EXTRA]
    assert len(upstream_requests(fake_upstream)) == 1


@STREAMED
def test_a_name_off_by_case_and_an_enum_value_off_by_case_are_cleaned(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    sloppy = {"name": "get_weather", "arguments": {"Location": "Oslo", "unit": "celsius"}}
    assert ask(sdk, [{"tool_calls": [sloppy]}], streamed) == [GOOD]
    assert len(upstream_requests(fake_upstream)) == 1, "deterministic: no repair"


@STREAMED
def test_a_schema_open_to_other_names_is_respected(
    sdk: Sdk, fake_upstream: FakeUpstream, streamed: bool
) -> None:
    search = {"name": "open_search", "arguments": {"q": "oslo", "site": "yr.no"}}
    assert ask(sdk, [{"tool_calls": [search]}], streamed) == [search]
    assert len(upstream_requests(fake_upstream)) == 1


def test_the_plain_answer_says_what_was_cleaned(
    policy_gw: Logged, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": TOOLS,
        "fake": {
            "replies": [
                {"tool_calls": [{**GOOD, "arguments": {"location": "Oslo", "unit": "CELSIUS"}}]}
            ]
        },
    }
    resp = asyncio.run(request("POST", policy_gw.server.url + "/v1/chat/completions", body=body))
    assert resp.headers["x-gateway-tool-guard"] == "cleaned"
    line = policy_gw.lines(server_thread)[-1]
    assert line["tool_cleanings"] == ["enum_case"]
    text = asyncio.run(request("GET", policy_gw.server.url + "/metrics")).text
    assert 'gateway_tool_call_cleanings_total{model="fake-model",reason="enum_case"}' in text
