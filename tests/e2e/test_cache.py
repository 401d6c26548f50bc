"""The semantic cache end to end: the real OpenAI SDK, the gateway on a socket, the fake
upstream behind it, and the real MiniLM embedder (loaded once for the session)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.http.keys import CACHE as CACHE_KEY
from gateway.http.keys import RUNTIME_REF
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import assert_conforms, poll_until, request, sse_json, upstream_requests

CACHE = {
    "store": {"type": "memory"},
    "embedder": {"type": "minilm"},
    "defaults": {"enabled": True},
}
TENANTS = 20


@pytest.fixture(scope="module")
def cached_gateway(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    keys = [{"env": f"CACHE_TENANT_{i}", "tenant": f"tenant-{i}"} for i in range(TENANTS)]
    environ = {f"CACHE_TENANT_{i}": f"key-{i}" for i in range(TENANTS)}
    settings = settings_for(fake.url, {"cache": CACHE, "auth": {"keys": keys}}, environ)
    with running_gateway(server_thread, settings) as gateway:
        cache = gateway.app[CACHE_KEY]
        assert cache is not None
        server_thread.call(cache.wait_ready(), timeout=120)
        assert cache.embedder_ready, cache.embedder_error
        yield gateway


@pytest.fixture
def cgw(
    cached_gateway: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> GatewayServer:
    cache = cached_gateway.app[CACHE_KEY]
    assert cache is not None
    server_thread.call(cache.flush())  # the previous test's last write must not land later
    server_thread.call(cache.store.purge())
    return cached_gateway


def _client(gw: GatewayServer, tenant: int = 0) -> openai.OpenAI:
    return sdk_client(gw.url, f"key-{tenant}")


def _ask(client: openai.OpenAI, text: str, **kw: Any) -> tuple[str, dict[str, str]]:
    raw = client.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": text}], **kw
    )
    completion = raw.parse()
    return completion.choices[0].message.content or "", dict(raw.headers)


def _settle(gw: GatewayServer, server_thread: ServerThread) -> None:
    cache = gw.app[CACHE_KEY]
    assert cache is not None
    server_thread.call(cache.flush())


def test_miss_then_exact_then_semantic_hit(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = _client(cgw)
    first, headers = _ask(client, "How do I reset my password?")
    assert headers["x-gateway-cache"] == "miss"
    _settle(cgw, server_thread)
    again, headers = _ask(client, "How do I reset my password?")
    assert (again, headers["x-gateway-cache"]) == (first, "hit-exact")
    spaced, headers = _ask(client, "  How do I reset my password?\r\n")
    assert (spaced, headers["x-gateway-cache"]) == (first, "hit-exact")  # ends and line endings
    # Case is not folded by the exact tier (SAT is not sat): the semantic tier and its
    # guards decide, and a lower-case retyping passes them.
    close, headers = _ask(client, "how do i reset my password")
    assert (close, headers["x-gateway-cache"]) == (first, "hit-semantic")
    paraphrase, headers = _ask(client, "How can I reset my password?")
    assert (paraphrase, headers["x-gateway-cache"]) == (first, "hit-semantic")
    assert float(headers["x-gateway-cache-similarity"]) >= 0.95
    assert len(upstream_requests(fake_upstream)) == 1


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("How far is 5 km in miles?", "How far is 50 km in miles?"),
        ("What is the weather in Paris today?", "What is the weather in London today?"),
        (
            "Should I enable two factor authentication?",
            "Should I not enable two factor authentication?",
        ),
    ],
)
def test_near_misses_go_upstream(
    cgw: GatewayServer,
    fake_upstream: FakeUpstream,
    server_thread: ServerThread,
    stored: str,
    asked: str,
) -> None:
    client = _client(cgw)
    _ask(client, stored)
    _settle(cgw, server_thread)
    answer, headers = _ask(client, asked)
    assert headers["x-gateway-cache"] == "miss" and answer == f"Echo: {asked}"
    if float(headers.get("x-gateway-cache-similarity", 0)) >= 0.94:  # a refused candidate
        assert headers["x-gateway-cache-near-miss"]


def test_the_judge_takes_back_a_rewording_only_a_word_rule_refused(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    """Under the cosine threshold and refused by the qualifier rule, but the pair judge is sure:
    a hit, with the judge's score in its header."""
    client = _client(cgw)
    first, _ = _ask(client, "How can I improve my sleep?")
    _settle(cgw, server_thread)
    again, headers = _ask(client, "What are some ways to sleep better?")
    assert (again, headers["x-gateway-cache"]) == (first, "hit-semantic")
    assert float(headers["x-gateway-cache-judge"]) >= 0.95
    assert 0.85 <= float(headers["x-gateway-cache-similarity"]) < 0.94
    assert len(upstream_requests(fake_upstream)) == 1


def test_a_swap_the_judge_doubts_stays_a_miss_with_the_rule_named(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = _client(cgw)
    _ask(client, "Why did Rome invade Carthage?")
    _settle(cgw, server_thread)
    answer, headers = _ask(client, "Why did Carthage invade Rome?")
    assert headers["x-gateway-cache"] == "miss" and answer == "Echo: Why did Carthage invade Rome?"
    assert headers["x-gateway-cache-near-miss"] == "order"
    assert float(headers["x-gateway-cache-judge"]) < 0.95  # asked, and not sure


def test_scope_isolation(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    base = {"messages": [{"role": "user", "content": "Name a prime number."}]}
    variants: list[dict[str, Any]] = [
        {},
        {"temperature": 0.7},
        {"messages": [{"role": "system", "content": "Be brief."}, *base["messages"]]},
        {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "tool_choice": "none",
        },
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hey"},
                *base["messages"],
            ]
        },
    ]
    for variant in variants:
        for tenant in (0, 1):
            raw = _client(cgw, tenant).chat.completions.with_raw_response.create(
                model="fake-model", **{**base, **variant}
            )
            assert raw.headers["x-gateway-cache"] == "miss", (variant, tenant)
            _settle(cgw, server_thread)


def test_streamed_hit_is_replayed_as_real_sse(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = _client(cgw)
    question = "Explain what a semantic cache does in one long sentence, please."
    first, _ = _ask(client, question)
    _settle(cgw, server_thread)
    response = asyncio.run(
        request(
            "POST",
            cgw.url + "/v1/chat/completions",
            headers={"Authorization": "Bearer key-0"},
            body={
                "model": "fake-model",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": question}],
            },
        )
    )
    assert response.headers["x-gateway-cache"] == "hit-exact"
    chunks, done = sse_json(response.sse())
    assert done
    for chunk in chunks:
        assert_conforms(chunk, "CreateChatCompletionStreamResponse")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == first and len(chunks) > 4
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    streamed = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": question}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == first


def test_streamed_miss_is_stored_once_complete(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = _client(cgw)
    question = "What does a circuit breaker protect?"
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": question}], stream=True
        )
        if c.choices
    )
    _settle(cgw, server_thread)
    answer, headers = _ask(client, question)
    assert headers["x-gateway-cache"] == "hit-exact" and answer == streamed


@pytest.mark.parametrize(
    "fault",
    [{"cut_after": 3}, {"stream_error_after": 2}, {"no_done": True}],
)
def test_broken_streams_are_never_cached(
    cgw: GatewayServer,
    fake_upstream: FakeUpstream,
    server_thread: ServerThread,
    fault: dict[str, Any],
) -> None:
    fake_upstream.defaults = Knobs(**fault)
    client = _client(cgw)
    question = "Tell me about broken streams and caches."
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": question}], stream=True
        ):
            pass
    _settle(cgw, server_thread)
    fake_upstream.defaults = Knobs()
    _, headers = _ask(client, question)
    assert headers["x-gateway-cache"] == "miss"


def test_tool_calls_and_errors_are_not_cached(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = _client(cgw)
    tool_reply = {"replies": [{"tool_calls": [{"name": "f", "arguments": {}}]}]}
    fake_upstream.defaults = Knobs.model_validate(tool_reply)
    _ask(client, "Call the tool.")
    _settle(cgw, server_thread)
    assert _ask(client, "Call the tool.")[1]["x-gateway-cache"] == "miss"
    fake_upstream.defaults = Knobs(status=500)
    with pytest.raises(openai.APIStatusError):
        _ask(client, "This will fail.")
    _settle(cgw, server_thread)
    fake_upstream.defaults = Knobs()
    assert _ask(client, "This will fail.")[1]["x-gateway-cache"] == "miss"


def test_client_directives(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    client = _client(cgw)
    _ask(client, "What is HTTP?")
    _settle(cgw, server_thread)
    for headers, expected in [
        ({"x-gateway-cache": "bypass"}, "bypass"),
        ({"Cache-Control": "no-store"}, "bypass"),
        ({"x-gateway-cache": "refresh"}, "refresh"),
        ({"Cache-Control": "no-cache"}, "refresh"),
        ({}, "hit-exact"),
    ]:
        assert (
            _ask(client, "What is HTTP?", extra_headers=headers)[1]["x-gateway-cache"] == expected
        )
    with pytest.raises(openai.BadRequestError, match="x-gateway-cache"):
        _ask(client, "What is HTTP?", extra_headers={"x-gateway-cache": "sometimes"})


def test_admin_stats_and_purge(server_thread: ServerThread, fake: FakeUpstream) -> None:
    settings = settings_for(
        fake.url,
        {"cache": {**CACHE, "embedder": {"type": "hash"}}},
        {"GATEWAY_ADMIN_KEY": "root-key"},
    )
    with running_gateway(server_thread, settings) as gateway:
        client = _client(gateway)
        _ask(client, "Count me.")
        _settle(gateway, server_thread)
        admin = {"Authorization": "Bearer root-key"}

        def call(method: str, path: str, **kw: Any) -> Any:
            return asyncio.run(request(method, gateway.url + path, **kw))

        assert call("GET", "/admin/cache/stats").status == 401
        stats = call("GET", "/admin/cache/stats", headers=admin).json()
        assert stats["entries"] == 1 and stats["by_model"] == {"fake-model": 1}
        purged = call("POST", "/admin/cache/purge", body={"tenant": "local"}, headers=admin)
        assert purged.json() == {"purged": 1}
        bad = call("POST", "/admin/cache/purge", body={"tenant": 3}, headers=admin)
        assert bad.status == 400
        assert _ask(client, "Count me.")[1]["x-gateway-cache"] == "miss"


def test_no_tenant_or_marker_ever_gets_another_ones_answer(
    cgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    """200 concurrent clients over 20 tenants: a shared question per tenant (answers name the
    tenant) and a question with a unique order number each, every one asked twice."""
    fake_upstream.defaults = Knobs(echo_user=True)
    contaminations, hits = 0, 0

    async def client_run(i: int) -> None:
        nonlocal contaminations, hits
        tenant = i % TENANTS
        client = openai.AsyncOpenAI(
            base_url=cgw.url + "/v1", api_key=f"key-{tenant}", max_retries=0, timeout=60
        )
        questions = ["What are your opening hours?", f"What is the status of order {1000 + i}?"]
        try:
            for _ in range(2):
                for question in random.sample(questions, 2):
                    raw = await client.chat.completions.with_raw_response.create(
                        model="fake-model",
                        user=f"tenant-{tenant}",
                        messages=[{"role": "user", "content": question}],
                    )
                    content = raw.parse().choices[0].message.content
                    if content != f"Echo[tenant-{tenant}]: {question}":
                        contaminations += 1
                    hits += raw.headers["x-gateway-cache"].startswith("hit")
        finally:
            await client.close()

    async def everyone() -> None:
        await asyncio.gather(*(client_run(i) for i in range(200)))

    asyncio.run(everyone())
    assert contaminations == 0
    assert hits > 0  # the cache was really in play


def test_a_restarted_gateway_still_serves_its_hits(
    server_thread: ServerThread, fake: FakeUpstream, tmp_path: Any
) -> None:
    path = tmp_path / "cache.sqlite3"
    cache = {**CACHE, "store": {"type": "sqlite", "path": str(path)}, "embedder": {"type": "hash"}}
    settings = settings_for(fake.url, {"cache": cache})
    with running_gateway(server_thread, settings) as first:
        answer, headers = _ask(_client(first), "Will this survive a restart?")
        assert headers["x-gateway-cache"] == "miss"
        _settle(first, server_thread)
    with running_gateway(server_thread, settings) as second:
        cache = second.app[CACHE_KEY]
        assert cache is not None
        server_thread.call(cache.wait_ready())
        again, headers = _ask(_client(second), "Will this survive a restart?")
        assert (again, headers["x-gateway-cache"]) == (answer, "hit-exact")
    stats = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "cache",
            "stats",
            "--config",
            str(_config_file(tmp_path, path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(stats.stdout)["entries"] == 1


def _config_file(tmp_path: Path, store: Path) -> Path:
    return write_config(
        tmp_path,
        {
            "providers": {"d": {"type": "demo"}},
            "models": [{"name": "d", "provider": "d"}],
            "cache": {"store": {"type": "sqlite", "path": str(store)}},
        },
    )


def test_a_hit_through_an_alias_says_which_tier_answered(
    server_thread: ServerThread, fake: FakeUpstream, fake_upstream: FakeUpstream
) -> None:
    tiers = [{"model": "fake-model", "max_score": 0.5}, {"model": "mapped"}]
    extra = {"cache": CACHE, "routing": {"aliases": {"auto": {"tiers": tiers}}}}
    with running_gateway(server_thread, settings_for(fake.url, extra)) as gateway:
        router = gateway.app[RUNTIME_REF].current.router
        assert poll_until(lambda: router.ready, timeout=60), "exemplars embedded"
        client = _client(gateway)
        heads = []
        for stream in (False, False, True):
            raw = client.chat.completions.with_raw_response.create(
                model="auto",
                messages=[{"role": "user", "content": "hi, how are you?"}],
                stream=stream,
            )
            list(raw.parse()) if stream else raw.parse()
            heads.append(raw.headers)
    assert [h["x-gateway-cache"] for h in heads] == ["miss", "hit-exact", "hit-exact"]
    assert "model=fake-model" in heads[0]["x-gateway-route"]
    assert heads[1]["x-gateway-route"] == heads[2]["x-gateway-route"] == heads[0]["x-gateway-route"]


def test_a_long_pasted_document_is_never_a_semantic_hit(
    cgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    """MiniLM reads 128 tokens: two prompts sharing a long document and differing in the final
    instruction score 1.0. They are kept to the exact tier."""
    document = "Here is our refund policy. " + (
        "Customers may return unopened items within thirty days for a full refund. " * 30
    )
    client = _client(cgw)
    first, headers = _ask(client, document + "Summarize this in one sentence.")
    assert headers["x-gateway-cache"] == "miss"
    other, headers = _ask(client, document + "Translate this into German.")
    assert headers["x-gateway-cache"] == "miss" and other != first
    assert headers["x-gateway-cache-exact-only"] == "long-text"
    again, headers = _ask(client, document + "Summarize this in one sentence.")
    assert (again, headers["x-gateway-cache"]) == (first, "hit-exact")
    assert len(upstream_requests(fake_upstream)) == 2
