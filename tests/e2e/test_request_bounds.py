"""Per-request bounds end to end (docs/RELIABILITY.md, "Per-request bounds"): an error body
quotes at most a few hundred characters of what the client sent, however much it sent, and a
`tool_choice` naming a tool the request does not declare is the client's 400 before any
upstream call. The gateway is on a loopback socket, the client the real OpenAI SDK where it can
send the request (raw aiohttp for paths and headers it would not), the fake upstream behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.errors import ECHO_CHARS
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import (
    FAKE_PROVIDER_KEY_ENV,
    TEST_RESILIENCE,
    fake_config,
    settings_for,
)
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.chat import function_tool
from tests.clients import sdk_client
from tests.e2e.helpers import assert_raw_error, request, settings_from_files, upstream_requests

Json = dict[str, Any]
HUGE = 200_000
# What an error body may hold at most: its own words, the quote, the JSON around them.
MAX_ERROR_BYTES = 1_500


@pytest.fixture(scope="module")
def roomy(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    """A gateway that reads bodies of a few MB, so a 200 KB field reaches validation."""
    settings = settings_for(fake.url, {"server": {"max_body_bytes": 4 * 1024 * 1024}})
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.fixture
def gw(roomy: GatewayServer, fake_upstream: FakeUpstream) -> GatewayServer:
    return roomy


def _assert_bounded(body: bytes, marker: str) -> None:
    assert len(body) <= MAX_ERROR_BYTES, f"{len(body)} bytes: {body[:200]!r}"
    assert marker * (ECHO_CHARS + 1) not in body.decode(), "more than ECHO_CHARS echoed"


def _chat(model: str = "fake-model", **more: Any) -> Json:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **more}


# --- error bodies quote a bounded part of the input -------------------------------------------


def test_an_unknown_200_kb_model_name_is_quoted_in_part(gw: GatewayServer) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        sdk_client(gw.url).chat.completions.create(**_chat("m" * HUGE))
    assert info.value.code == "model_not_found"
    _assert_bounded(info.value.response.content, "m")
    assert f"({HUGE} characters)" in info.value.message, "the length it had is said"


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/embeddings", {"model": "e" * HUGE, "input": "x"}, 404, "model"),
        ("/v1/completions", {"model": "c" * HUGE, "prompt": "x"}, 404, "model"),
        ("/v1/responses", {"model": "r" * HUGE, "input": "x"}, 404, "model"),
        (
            "/v1/responses",
            {"model": "fake-model", "input": "x", "previous_response_id": "p" * HUGE},
            404,
            "previous_response_id",
        ),
        (
            "/v1/responses",
            {"model": "fake-model", "input": [{"type": "t" * HUGE}]},
            400,
            "input[0].type",
        ),
        (
            "/v1/completions",
            {"model": "fake-model", "prompt": "x", "logit_bias": {"k" * HUGE: "not a number"}},
            400,
            None,
        ),
    ],
    ids=["embeddings", "completions", "responses", "previous-id", "item-type", "dict-key"],
)
async def test_every_endpoint_quotes_a_bounded_part(
    gw: GatewayServer, path: str, body: Json, status: int, param: str | None
) -> None:
    resp = await request("POST", gw.url + path, body=body)
    error = assert_raw_error(resp, status, param=param)
    marker = next(c for c in resp.text if c * 50 in resp.text)
    _assert_bounded(resp.body, marker)
    assert len(error["param"] or "") <= 256


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/v1/models/" + "g" * 7_000, {}),
        ("GET", "/v1/" + "u" * 7_000, {}),
        ("DELETE", "/v1/chat/" + "d" * 7_000, {}),
        ("GET", "/v1/responses/" + "i" * 7_000, {}),
        ("POST", "/v1/chat/completions", {"x-gateway-timeout": "t" * 7_000}),
        ("POST", "/v1/chat/completions", {"x-gateway-cache": "c" * 7_000}),
        ("POST", "/v1/chat/completions", {"x-gateway-knowledge-base": "k" * 7_000}),
    ],
    ids=["model-card", "route", "method", "response-id", "timeout", "cache", "knowledge"],
)
async def test_paths_and_headers_are_quoted_in_part(
    gw: GatewayServer, method: str, path: str, headers: dict[str, str]
) -> None:
    body = _chat() if method == "POST" else None
    resp = await request(method, gw.url + path, body=body, headers=headers)
    assert 400 <= resp.status < 500, resp.text[:300]
    marker = (path.rsplit("/", 1)[-1] or next(iter(headers.values())))[0]
    if headers:
        marker = next(iter(headers.values()))[0]
    _assert_bounded(resp.body, marker)


# --- tool_choice names a declared tool, or it is the client's 400 ----------------------------

WEATHER = function_tool("get_weather", {"city": {"type": "string"}}, ["city"])


@pytest.mark.parametrize(
    "call",
    [
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "send"}}},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": "required"},
        {
            "tools": [WEATHER],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "send"}}],
                },
            },
        },
    ],
    ids=["undeclared", "no-tools", "required-without-tools", "allowed-undeclared"],
)
def test_a_tool_choice_the_tools_cannot_meet_is_refused_before_the_upstream(
    gw: GatewayServer, fake_upstream: FakeUpstream, call: Json
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk_client(gw.url).chat.completions.create(**_chat(**call))
    assert info.value.param == "tool_choice" and info.value.code == "invalid_value"
    assert "tool_choice" in info.value.message
    assert upstream_requests(fake_upstream) == [], "no upstream call, no repair"


def test_an_undeclared_tool_name_is_quoted_in_part(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    choice = {"type": "function", "function": {"name": "n" * HUGE}}
    with pytest.raises(openai.BadRequestError) as info:
        sdk_client(gw.url).chat.completions.create(**_chat(tools=[WEATHER], tool_choice=choice))
    _assert_bounded(info.value.response.content, "n")


@pytest.mark.parametrize(
    "choice",
    [
        "auto",
        "none",
        "required",
        {"type": "function", "function": {"name": "get_weather"}},
        {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "auto",
                "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            },
        },
    ],
)
def test_a_tool_choice_naming_a_declared_tool_goes_upstream(
    gw: GatewayServer, fake_upstream: FakeUpstream, choice: Any
) -> None:
    sdk_client(gw.url).chat.completions.create(**_chat(tools=[WEATHER], tool_choice=choice))
    sent = upstream_requests(fake_upstream)
    assert sent and sent[0]["body"]["tool_choice"] == choice


async def test_the_responses_api_refuses_an_undeclared_tool_choice_too(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    body = {
        "model": "fake-model",
        "input": "hi",
        "tools": [tool],
        "tool_choice": {"type": "function", "name": "send"},
    }
    resp = await request("POST", gw.url + "/v1/responses", body=body)
    assert_raw_error(resp, 400, param="tool_choice")
    assert upstream_requests(fake_upstream, "/v1/chat/completions") == []


# --- /v1/completions: prompts x n are capped, and counted as the calls they cause ------------

TENANTS = ("metered-a", "metered-b", "metered-c", "metered-d", "roomy")
POLICIES: dict[str, Json] = {
    "metered": {
        "match": {"tenants": [t for t in TENANTS if t.startswith("metered")]},
        "rate_limits": {"requests_per_second": 0.01, "burst": 4},  # no refill meanwhile
    },
}


@pytest.fixture(scope="module")
def capped(
    server_thread: ServerThread, fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    """Tenants with keys, four of them allowed 4 requests at once; the completions caps set
    low (10 prompts, 20 choices)."""
    config = {
        **fake_config(fake.url),
        **TEST_RESILIENCE,
        "server": {"completions_max_prompts": 10, "completions_max_choices": 20},
        "auth": {"keys": [{"env": _env(t), "tenant": t} for t in TENANTS]},
    }
    environ = {_env(t): _key(t) for t in TENANTS} | {FAKE_PROVIDER_KEY_ENV: "sk-fake"}
    root = tmp_path_factory.mktemp("capped")
    with running_gateway(server_thread, settings_from_files(root, config, POLICIES, environ)) as gw:
        yield gw


def _env(tenant: str) -> str:
    return "BOUNDS_" + tenant.upper().replace("-", "_")


def _key(tenant: str) -> str:
    return f"sk-bounds-{tenant}"


def _complete(
    gw: GatewayServer, tenant: str | None = None, model: str = "fake-model", **call: Any
) -> Any:
    client = sdk_client(gw.url, _key(tenant) if tenant else "k")
    return client.completions.create(model=model, **call)


@pytest.mark.parametrize(
    ("call", "param", "code"),
    [
        ({"prompt": ["p"] * 2048}, "prompt", "too_many_choices"),  # OpenAI's own list limit
        ({"prompt": ["p"] * 3, "n": 43}, "n", "too_many_choices"),  # 129 choices
        ({"prompt": "p", "n": 129}, "n", None),  # n's own bound, as OpenAI's
        ({"prompt": ["p"] * 2049}, "prompt", "too_many_prompts"),
    ],
    ids=["2048-prompts", "prompts-x-n", "n", "2049-prompts"],
)
def test_by_default_one_request_asks_for_at_most_128_choices(
    gw: GatewayServer, fake_upstream: FakeUpstream, call: Json, param: str, code: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _complete(gw, **call)
    assert info.value.param == param
    if code is not None:
        assert info.value.code == code
    assert upstream_requests(fake_upstream) == [], "refused before any upstream call"


def test_128_choices_are_answered(gw: GatewayServer) -> None:
    answer = _complete(gw, model="demo", prompt=[f"p{i}" for i in range(64)], n=2)
    assert [c.index for c in answer.choices] == list(range(128))


@pytest.mark.parametrize(
    ("call", "param", "code"),
    [
        ({"prompt": ["p"] * 11}, "prompt", "too_many_prompts"),
        ({"prompt": ["p"] * 5, "n": 5}, "n", "too_many_choices"),
        ({"prompt": "p", "n": 21}, "n", "too_many_choices"),
        ({"prompt": [[1, 2]] * 21}, "prompt", "too_many_prompts"),  # token prompts, native
    ],
    ids=["prompts", "prompts-x-n", "n", "token-prompts"],
)
def test_the_caps_are_set_in_config(
    capped: GatewayServer, fake_upstream: FakeUpstream, call: Json, param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _complete(capped, "roomy", **call)
    assert (info.value.param, info.value.code) == (param, code)
    assert "choices" in info.value.message or "prompts" in info.value.message
    assert list(fake_upstream.received) == []


def test_each_prompt_counts_as_a_request(capped: GatewayServer, fake_upstream: FakeUpstream):
    assert len(_complete(capped, "metered-a", prompt=["a", "b", "c", "d"]).choices) == 4
    with pytest.raises(openai.RateLimitError) as info:
        _complete(capped, "metered-a", prompt="one more")
    assert info.value.code == "rate_limit_exceeded"
    assert int(info.value.response.headers["Retry-After"]) >= 90
    assert len(upstream_requests(fake_upstream)) == 4


def test_each_choice_counts_as_a_request(capped: GatewayServer, fake_upstream: FakeUpstream):
    assert len(_complete(capped, "metered-d", model="demo", prompt="x", n=4).choices) == 4
    with pytest.raises(openai.RateLimitError):
        _complete(capped, "metered-d", prompt="one more")
    assert upstream_requests(fake_upstream) == []


def test_a_fan_out_the_bucket_cannot_pay_is_refused_before_any_call(
    capped: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    for text in ("first", "second"):
        _complete(capped, "metered-c", prompt=text)
    with pytest.raises(openai.RateLimitError) as info:  # 4 calls, 2 left in the bucket
        _complete(capped, "metered-c", prompt=["a", "b", "c", "d"])
    assert info.value.code == "rate_limit_exceeded"
    assert len(upstream_requests(fake_upstream)) == 2


def test_a_fan_out_larger_than_the_burst_is_answered_once_then_paid_for(
    capped: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """Ten calls on a bucket of four: admitted when the bucket is full (never refused for
    good), and the six beyond it are debt the next request waits for."""
    assert len(_complete(capped, "metered-b", prompt=[f"p{i}" for i in range(10)]).choices) == 10
    with pytest.raises(openai.RateLimitError) as info:
        _complete(capped, "metered-b", prompt="one more")
    assert int(info.value.response.headers["Retry-After"]) >= 600  # 7 requests at 0.01/s
