"""Per-tenant rate limits through the gateway: 429 with Retry-After and an OpenAI error body."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import request

KEYS = {"KEY_SLOW_TEAM": "sk-slow-team", "KEY_BIG_TEAM": "sk-big-team", "KEY_SOLO": "sk-solo"}


@pytest.fixture(scope="module")
def limited(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    keys = [
        {"env": "KEY_SLOW_TEAM", "tenant": "slow-team"},
        {"env": "KEY_BIG_TEAM", "tenant": "big-team"},
        {"env": "KEY_SOLO", "tenant": "solo"},
    ]
    limits = {
        "default": {"requests_per_second": 0.5, "burst": 2, "concurrent": 1},
        "tenants": {"big-team": {"requests_per_second": 1000}, "solo": {"concurrent": 1}},
    }
    extra = {"auth": {"keys": keys}, "rate_limits": limits}
    with running_gateway(server_thread, settings_for(fake.url, extra, KEYS)) as server:
        yield server


def client(gw: GatewayServer, key: str) -> openai.OpenAI:
    return sdk_client(gw.url, key)


def ask(gw: GatewayServer, key: str) -> str | None:
    reply = client(gw, key).chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "x"}]
    )
    return reply.choices[0].message.content


def test_a_burst_then_429_with_retry_after(limited: GatewayServer, fake_upstream: Any) -> None:
    assert ask(limited, "sk-slow-team") and ask(limited, "sk-slow-team")  # the burst of 2
    with pytest.raises(openai.RateLimitError) as info:
        ask(limited, "sk-slow-team")
    error = info.value
    assert error.code == "rate_limit_exceeded" and "requests per second" in error.message
    assert 1 <= int(error.response.headers["retry-after"]) <= 2
    assert ask(limited, "sk-big-team"), "another tenant has its own budget"
    text = asyncio.run(request("GET", limited.url + "/metrics")).text
    assert 'gateway_rate_limited_total{limit="requests_per_second"}' in text


def test_concurrent_requests_are_limited(
    limited: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.defaults = Knobs(latency_ms=400)

    async def two_at_once(key: str) -> list[int]:
        headers = {"Authorization": f"Bearer {key}"}
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]}
        async with aiohttp.ClientSession(headers=headers) as session:

            async def one() -> int:
                async with session.post(limited.url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    return r.status

            return sorted(await asyncio.gather(one(), one()))

    assert asyncio.run(two_at_once("sk-solo")) == [200, 429], "one in flight at a time"
    assert asyncio.run(two_at_once("sk-solo")) == [200, 429], "the slot was given back"
    # big-team's own limits replace the default wholly: no concurrency limit.
    assert asyncio.run(two_at_once("sk-big-team")) == [200, 200]
