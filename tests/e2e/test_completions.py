"""Legacy text completions (`POST /v1/completions`) end to end: the real OpenAI SDK
(`client.completions.create`, plain and streamed) against the gateway on a socket, the fake
upstream behind it. Translated requests go through the chat pipeline, so its cache, level 4,
metrics and errors apply; every answer and chunk is checked against the official schema.

The official `CreateCompletionResponse` also describes streamed chunks, and wants a string
`finish_reason` in every one; the real API streams `null` until the last chunk (README of
tests/data/openai). Chunks are therefore checked against a copy of the schema
(helpers.completion_chunk_validator) whose `finish_reason` may also be null; the last chunk
is checked against the schema as published.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs, Received
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.metrics import scrape
from tests.clients import sdk_client
from tests.e2e.helpers import (
    assert_conforms,
    assert_raw_error,
    completion_chunk_validator,
    last_upstream_body,
    request,
    settings_from_files,
    sse_json,
    upstream_requests,
)

Json = dict[str, Any]
UNAVAILABLE = "Down for a moment, retry soon."
CHAT = "/v1/chat/completions"


def completions_config(fake_url: str, dead: str) -> Json:
    """`dead`: the URL of a provider in an outage."""

    def native(name: str, **more: Any) -> Json:
        return {"name": name, "provider": "native", "upstream_model": f"{name}-up", **more}

    return {
        "server": {"access_log": False},
        "providers": {
            "fake": {"type": "openai", "base_url": fake_url},
            "dead": {"type": "openai", "base_url": dead},
            # The same fake, declared to serve the legacy endpoint itself.
            "native": {"type": "openai", "base_url": fake_url, "native": ["completions"]},
            "native-dead": {"type": "openai", "base_url": dead, "native": ["completions"]},
        },
        "models": [
            {"name": "text", "provider": "fake", "upstream_model": "text-up"},
            {
                "name": "cached",
                "provider": "fake",
                "upstream_model": "cached-up",
                "cache": {"enabled": True, "semantic": False},
            },
            {"name": "down", "provider": "dead"},
            native("legacy", fallbacks=["legacy-backup"]),
            native("legacy-backup"),
            native("legacy-lonely", fallbacks=["text"]),  # a fallback that is not native
            {"name": "legacy-down", "provider": "native-dead"},
        ],
        "cache": {"store": {"type": "memory"}},
        "resilience": {
            "retry": {"attempts": 2, "initial_backoff_ms": 1, "max_backoff_ms": 2},
            "breaker": {"failures": 1000},
        },
        "degradation": {"unavailable": {"mode": "answer", "message": {"en": UNAVAILABLE}}},
    }


@pytest.fixture(scope="module")
def cgw_server(
    server_thread: ServerThread, fake: FakeUpstream, down: FakeUpstream
) -> Iterator[GatewayServer]:
    settings = settings_of(completions_config(fake.url, down.url))
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.fixture
def gw(cgw_server: GatewayServer, fake_upstream: FakeUpstream) -> GatewayServer:
    return cgw_server


def client(gw: GatewayServer) -> openai.OpenAI:
    return sdk_client(gw.url, "k", 20)


def assert_chunks_conform(chunks: list[Json]) -> None:
    for chunk in chunks:
        errors = list(completion_chunk_validator().iter_errors(chunk))
        assert not errors, f"{chunk}: {errors[0].message}"
    finals = [c for c in chunks if any(ch["finish_reason"] for ch in c["choices"])]
    assert finals, "no chunk carries a finish_reason"
    assert_conforms(finals[-1], "CreateCompletionResponse")


async def raw_stream(gw: GatewayServer, **body: Any) -> tuple[list[Json], bool]:
    resp = await request("POST", gw.url + "/v1/completions", body={**body, "stream": True})
    assert resp.status == 200, resp.text
    assert resp.content_type.startswith("text/event-stream")
    return sse_json(resp.sse())


# --- translated through the chat pipeline ----------------------------------------------------


def test_a_plain_completion_is_a_text_completion(gw: GatewayServer, fake_upstream: FakeUpstream):
    raw = client(gw).completions.with_raw_response.create(
        model="text", prompt="hello there", max_tokens=7, temperature=0.5, stop=["\n"]
    )
    assert_conforms(json.loads(raw.http_response.text), "CreateCompletionResponse")
    reply = raw.parse()
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert [(c.index, c.text, c.finish_reason) for c in reply.choices] == [
        (0, "Echo: hello there", "stop")
    ]
    assert reply.usage is not None and reply.usage.total_tokens == 15
    # The upstream was asked a chat question: the prompt as the user's turn, the parameters
    # as the client set them, nothing of the legacy API.
    assert last_upstream_body(fake_upstream) == {
        "model": "text-up",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 7,
        "temperature": 0.5,
        "stop": ["\n"],
    }


def test_a_streamed_completion_is_text_completion_chunks(gw: GatewayServer) -> None:
    stream = client(gw).completions.create(model="text", prompt="one two three", stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Echo: one two three"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert {c.object for c in chunks} == {"text_completion"}
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("cmpl-")


async def test_streamed_chunks_conform_and_end_with_done(gw: GatewayServer) -> None:
    chunks, done = await raw_stream(
        gw, model="text", prompt="a b c", stream_options={"include_usage": True}
    )
    assert done
    assert_chunks_conform([c for c in chunks if c["choices"]])
    usage = [c for c in chunks if not c["choices"]]
    assert len(usage) == 1 and usage[0]["usage"]["total_tokens"] == 15
    assert_conforms(usage[0], "CreateCompletionResponse")


async def test_usage_is_hidden_from_a_stream_that_did_not_ask(gw: GatewayServer) -> None:
    chunks, done = await raw_stream(gw, model="text", prompt="a b c")
    assert done and all(c["choices"] and "usage" not in c for c in chunks)


def test_a_list_of_prompts_is_one_choice_per_prompt_in_order(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = client(gw).completions.with_raw_response.create(
        model="text", prompt=["first", "second", "third"]
    )
    assert_conforms(json.loads(raw.http_response.text), "CreateCompletionResponse")
    reply = raw.parse()
    assert [(c.index, c.text) for c in reply.choices] == [
        (0, "Echo: first"),
        (1, "Echo: second"),
        (2, "Echo: third"),
    ]
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.total_tokens) == (30, 45)  # summed
    assert len(upstream_requests(fake_upstream)) == 3


def test_what_each_prompts_calls_did_is_on_the_requests_record(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    failed: list[str] = []

    def fail_the_second_once(received: Received) -> Knobs | None:
        text = received.body["messages"][-1]["content"]
        if text == "second" and not failed:
            failed.append(text)
            return received.knobs.model_copy(update={"status": 500})
        return None

    fake_upstream.inject(fail_the_second_once)
    raw = client(gw).completions.with_raw_response.create(
        model="text", prompt=["first", "second", "third"]
    )
    assert [c.text for c in raw.parse().choices] == ["Echo: first", "Echo: second", "Echo: third"]
    assert raw.headers["x-gateway-attempts"] == "4"  # three prompts, one of them retried


def test_choices_are_numbered_prompt_index_times_n(gw: GatewayServer) -> None:
    # The fake answers one choice per call whatever n is: prompt p's first choice is p * n.
    reply = client(gw).completions.create(model="text", prompt=["a", "b"], n=3)
    assert [(c.index, c.text) for c in reply.choices] == [(0, "Echo: a"), (3, "Echo: b")]


def test_completions_and_chat_share_the_cache(gw: GatewayServer, fake_upstream: FakeUpstream):
    question = "What is the boiling point of water at sea level?"
    chat = client(gw).chat.completions.with_raw_response.create(
        model="cached", messages=[{"role": "user", "content": question}], max_tokens=20
    )
    assert chat.headers["x-gateway-cache"] == "miss"
    legacy = client(gw).completions.with_raw_response.create(
        model="cached", prompt=question, max_tokens=20
    )
    assert legacy.headers["x-gateway-cache"] == "hit-exact"
    assert legacy.parse().choices[0].text == chat.parse().choices[0].message.content
    assert len(upstream_requests(fake_upstream)) == 1
    # A streamed completion of the same question is a replayed hit too.
    chunks = list(
        client(gw).completions.create(model="cached", prompt=question, max_tokens=20, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == f"Echo: {question}"
    assert len(upstream_requests(fake_upstream)) == 1


def test_level_4_is_a_well_formed_text_completion(gw: GatewayServer) -> None:
    raw = client(gw).completions.with_raw_response.create(model="down", prompt="hello")
    assert raw.headers["x-gateway-degraded"] == "unavailable"
    assert_conforms(json.loads(raw.http_response.text), "CreateCompletionResponse")
    assert raw.parse().choices[0].text == UNAVAILABLE


async def test_level_4_streamed(gw: GatewayServer) -> None:
    chunks, done = await raw_stream(gw, model="down", prompt="hello")
    assert done
    assert_chunks_conform(chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == UNAVAILABLE


async def test_a_stream_that_breaks_ends_with_an_error_event(gw: GatewayServer) -> None:
    chunks, done = await raw_stream(
        gw, model="text", prompt="one two three", fake={"stream_error_after": 2}
    )
    assert done
    *text, error = chunks
    assert set(error) == {"error"} and error["error"]["message"]
    assert text and all(not list(completion_chunk_validator().iter_errors(c)) for c in text)


def test_requests_are_counted_under_the_completions_endpoint(gw: GatewayServer) -> None:
    def count() -> float:
        found = scrape(gw.url, "gateway_requests_total")
        return sum(v for labels, v in found.items() if ("endpoint", "completions") in labels)

    before = count()
    client(gw).completions.create(model="text", prompt="count me")
    assert count() == before + 1


# --- refused without a native upstream --------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "call"),
    [
        ("echo", {"prompt": "hi", "echo": True}),
        ("logprobs", {"prompt": "hi", "logprobs": 2}),
        ("suffix", {"prompt": "hi", "suffix": " end."}),
        ("best_of", {"prompt": "hi", "best_of": 3}),
        ("prompt", {"prompt": [1, 2, 3]}),
        ("prompt", {"prompt": [[1, 2], [3]]}),
        ("prompt", {"prompt": ["a", "b"], "stream": True}),
    ],
)
async def test_what_needs_a_native_upstream_is_refused_by_name(
    gw: GatewayServer, fake_upstream: FakeUpstream, param: str, call: Json
) -> None:
    resp = await request("POST", gw.url + "/v1/completions", body={"model": "text", **call})
    error = assert_raw_error(resp, 400, param=param, code="unsupported_parameter")
    assert "natively" in error["message"]
    assert not list(fake_upstream.received)


async def test_what_translates_is_not_refused(gw: GatewayServer) -> None:
    # The defaults, said out loud, change nothing.
    body = {"model": "text", "prompt": "hi", "echo": False, "best_of": 1, "suffix": None}
    resp = await request("POST", gw.url + "/v1/completions", body=body)
    assert resp.status == 200 and resp.json()["choices"][0]["text"] == "Echo: hi"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "text"}, "prompt", "missing_required_parameter"),
        ({"model": "text", "prompt": 5}, "prompt", "invalid_value"),
        ({"model": "text", "prompt": "hi", "max_tokens": "7"}, "max_tokens", "invalid_value"),
        ({"model": "text", "prompt": "hi", "temperature": 3}, "temperature", "invalid_value"),
        ({"model": "text", "prompt": "hi", "logprobs": 9}, "logprobs", "invalid_value"),
        ({"prompt": "hi"}, "model", "missing_required_parameter"),
        ({"model": "nope", "prompt": "hi"}, "model", "model_not_found"),
    ],
)
async def test_bad_requests_name_the_legacy_field(
    gw: GatewayServer, body: Json, param: str, code: str
) -> None:
    resp = await request("POST", gw.url + "/v1/completions", body=body)
    status = 404 if code == "model_not_found" else 400
    assert_raw_error(resp, status, param=param, code=code)


# --- passed natively to an upstream that serves /v1/completions --------------------------------

COMPLETIONS = "/v1/completions"


def test_echo_logprobs_and_suffix_are_passed_natively(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = client(gw).completions.with_raw_response.create(
        model="legacy", prompt="Say hi. ", echo=True, logprobs=2, max_tokens=5
    )
    assert_conforms(json.loads(raw.http_response.text), "CreateCompletionResponse")
    choice = raw.parse().choices[0]
    assert choice.text == "Say hi. Echo: Say hi. "
    assert choice.logprobs is not None and choice.logprobs.tokens is not None
    assert "".join(choice.logprobs.tokens) == choice.text
    assert choice.logprobs.top_logprobs and len(choice.logprobs.top_logprobs[0]) == 2
    # The client's body went to the native endpoint as it came, the model mapped; no chat.
    assert last_upstream_body(fake_upstream, COMPLETIONS) == {
        "model": "legacy-up",
        "prompt": "Say hi. ",
        "echo": True,
        "logprobs": 2,
        "max_tokens": 5,
    }
    assert not upstream_requests(fake_upstream, CHAT)

    filled = client(gw).completions.create(model="legacy", prompt="def f(", suffix="return x")
    assert filled.choices[0].text == "Fill: def f( ... return x"


def test_token_prompts_and_best_of_are_passed_natively(gw: GatewayServer) -> None:
    reply = client(gw).completions.create(model="legacy", prompt=[[1, 2, 3], [4]], best_of=3)
    assert [(c.index, c.text) for c in reply.choices] == [(0, "Echo: 1 2 3"), (1, "Echo: 4")]


def test_a_plain_request_to_a_native_model_still_goes_through_chat(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    # Nothing native-only in it: translated, so the chat stages apply.
    reply = client(gw).completions.create(model="legacy", prompt="hello")
    assert reply.choices[0].text == "Echo: hello"
    assert upstream_requests(fake_upstream, CHAT)
    assert not upstream_requests(fake_upstream, COMPLETIONS)


async def test_a_native_stream_is_relayed_as_it_came(gw: GatewayServer) -> None:
    chunks, done = await raw_stream(
        gw,
        model="legacy",
        prompt="a b",
        echo=True,
        logprobs=1,
        stream_options={"include_usage": True},
    )
    assert done
    text = [c for c in chunks if c["choices"]]
    assert_chunks_conform(text)
    assert "".join(c["choices"][0]["text"] for c in text) == "a bEcho: a b"
    assert all(c["choices"][0]["logprobs"] for c in text if c["choices"][0]["text"])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15


def test_a_native_stream_through_the_sdk(gw: GatewayServer) -> None:
    stream = client(gw).completions.create(
        model="legacy", prompt=["one", "two"], echo=True, stream=True
    )
    texts: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {0: "oneEcho: one", 1: "twoEcho: two"}


async def test_a_native_stream_that_breaks_ends_with_an_error_event(gw: GatewayServer) -> None:
    chunks, done = await raw_stream(
        gw, model="legacy", prompt="a b c", echo=True, fake={"stream_error_after": 2}
    )
    assert done
    *text, error = chunks
    assert len(text) == 2 and set(error) == {"error"}
    assert "mid-stream" in error["error"]["message"]


def test_a_native_call_is_retried(gw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    fake_upstream.per_model["legacy-up"] = Knobs(status=500, fail_times=1)
    raw = client(gw).completions.with_raw_response.create(model="legacy", prompt="x", echo=True)
    assert raw.headers["x-gateway-attempts"] == "2" and "x-gateway-fallback" not in raw.headers
    assert raw.parse().choices[0].text == "xEcho: x"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_native_call_falls_back_to_a_native_fallback(
    gw: GatewayServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.per_model["legacy-up"] = Knobs(status=503)
    body = {"model": "legacy", "prompt": "x", "echo": True, "stream": stream}
    resp = await request("POST", gw.url + COMPLETIONS, body=body)
    assert resp.status == 200 and resp.headers["x-gateway-fallback"] == "legacy-backup"
    models = [r["body"]["model"] for r in upstream_requests(fake_upstream, COMPLETIONS)]
    assert models == ["legacy-up", "legacy-up", "legacy-backup-up"]  # two attempts, then it
    if stream:
        chunks, done = sse_json(resp.sse())
        assert done and "".join(c["choices"][0]["text"] for c in chunks) == "xEcho: x"
    else:
        assert resp.json()["choices"][0]["text"] == "xEcho: x"


def test_a_fallback_that_is_not_native_is_never_tried(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    # legacy-lonely falls back to `text`, which would get a chat request the echo cannot
    # go into: nothing is left to try, and the answer is level 4.
    fake_upstream.per_model["legacy-lonely-up"] = Knobs(status=503)
    raw = client(gw).completions.with_raw_response.create(
        model="legacy-lonely", prompt="x", echo=True
    )
    assert raw.headers["x-gateway-degraded"] == "unavailable"
    assert raw.parse().choices[0].text == UNAVAILABLE
    assert not upstream_requests(fake_upstream, CHAT)


async def test_level_4_on_the_native_path(gw: GatewayServer) -> None:
    raw = client(gw).completions.with_raw_response.create(
        model="legacy-down", prompt=["a", "b"], echo=True
    )
    assert raw.headers["x-gateway-degraded"] == "unavailable"
    assert_conforms(json.loads(raw.http_response.text), "CreateCompletionResponse")
    assert [c.text for c in raw.parse().choices] == [UNAVAILABLE, UNAVAILABLE]
    chunks, done = await raw_stream(gw, model="legacy-down", prompt="a", echo=True)
    assert done and "".join(c["choices"][0]["text"] for c in chunks) == UNAVAILABLE
    assert_chunks_conform(chunks)


async def test_a_native_upstream_error_is_the_clients(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.per_model["legacy-up"] = Knobs(status=400, error_message="bad logprobs")
    body = {"model": "legacy", "prompt": "x", "logprobs": 1}
    resp = await request("POST", gw.url + COMPLETIONS, body=body)
    error = assert_raw_error(resp, 400)
    assert "bad logprobs" in error["message"]


# --- the caller's own key and rate limits, on both paths ---------------------------------------

CALLER_KEY = "sk-callers-own-key-CCCC3333"
TENANT_KEYS = {"partner": "sk-gw-cmpl-partner", "metered": "sk-gw-cmpl-metered"}
POLICIES: dict[str, Json] = {
    "partners-byok": {
        "match": {"tenants": ["partner"]},
        "byok": {"enabled": True, "providers": ["fake", "native"]},
    },
    "metered": {
        "match": {"tenants": ["metered"]},
        "rate_limits": {"requests_per_second": 0.01, "burst": 1},
    },
}


@pytest.fixture(scope="module")
def keyed(
    server_thread: ServerThread,
    fake: FakeUpstream,
    down: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    keys = [{"env": f"CMPL_{t.upper()}", "tenant": t} for t in TENANT_KEYS]
    config = {**completions_config(fake.url, down.url), "auth": {"keys": keys}}
    environ = {f"CMPL_{t.upper()}": key for t, key in TENANT_KEYS.items()}
    root = tmp_path_factory.mktemp("completions-keyed")
    settings = settings_from_files(root, config, POLICIES, environ)
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.mark.parametrize(
    ("call", "path"),
    [({"prompt": "mine"}, CHAT), ({"prompt": "mine", "echo": True}, COMPLETIONS)],
    ids=["translated", "native"],
)
async def test_a_callers_own_key_goes_upstream_on_both_paths(
    keyed: GatewayServer, fake_upstream: FakeUpstream, call: Json, path: str
) -> None:
    headers = {
        "Authorization": f"Bearer {TENANT_KEYS['partner']}",
        "x-gateway-provider-key": CALLER_KEY,
    }
    body = {"model": "legacy", **call}
    resp = await request("POST", keyed.url + COMPLETIONS, body=body, headers=headers)
    assert resp.status == 200, resp.text
    (received,) = upstream_requests(fake_upstream, path)
    assert received["headers"]["Authorization"] == f"Bearer {CALLER_KEY}"


def test_completions_count_against_the_tenants_rate_limit(
    keyed: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    metered = sdk_client(keyed.url, TENANT_KEYS["metered"])
    assert metered.completions.create(model="text", prompt="one").choices[0].text
    with pytest.raises(openai.RateLimitError) as info:
        metered.completions.create(model="legacy", prompt="two", echo=True)
    assert info.value.code == "rate_limit_exceeded"
    assert len(list(fake_upstream.received)) == 1


def test_a_long_prompt_list_is_answered_a_few_prompts_at_a_time(
    gw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """Each prompt is a pipeline call; one request's calls are bounded (service.py
    CONCURRENT_PROMPTS), so a list of many is not as many upstream calls at once."""
    from gateway.completions.service import CONCURRENT_PROMPTS

    prompts = [f"prompt {i}" for i in range(40)]
    fake_upstream.defaults = Knobs(latency_ms=20)  # calls overlap while they last
    answer = client(gw).completions.create(model="text", prompt=prompts)
    assert [c.text for c in answer.choices] == [f"Echo: {p}" for p in prompts]
    assert 1 < fake_upstream.stats["peak_in_flight"] <= CONCURRENT_PROMPTS


async def test_more_prompts_than_openai_allows_are_refused(gw: GatewayServer) -> None:
    resp = await request(
        "POST", gw.url + "/v1/completions", body={"model": "text", "prompt": ["x"] * 2049}
    )
    assert_raw_error(resp, 400, param="prompt")
