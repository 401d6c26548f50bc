"""The cache in a real gateway process (`python -m gateway serve`) behind the fake upstream,
driven by the real synchronous OpenAI SDK: what a client sees right after an answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.starters import start_gateway
from tests.clients import sdk_client
from tests.e2e.huge_prompts import CONCURRENT, burst, stall_p99, summary
from tests.resilience.test_redis_breakers import unique_namespace

REPEATS = 200


@contextmanager
def cached_gateway(
    tmp_path: Path, fake_url: str, store: Json, server: Json | None = None
) -> Iterator[str]:
    timeouts = {"connect": 2, "read": 30, "total": 60}
    config = {
        "server": {"access_log": False, **(server or {})},
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY"},
        "providers": {"fake": {"type": "openai", "base_url": fake_url, "timeouts": timeouts}},
        "models": [{"name": "fake-model", "provider": "fake"}],
        "cache": {"store": store, "embedder": {"type": "hash"}, "defaults": {"enabled": True}},
        "resilience": {"retry": {"attempts": 1}},
    }
    with start_gateway(tmp_path, write_config(tmp_path, config), timeout=20) as gateway:
        yield gateway.url


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Json:
    if request.param == "sqlite":
        return {"type": "sqlite", "path": str(tmp_path / "cache.sqlite3")}
    url = request.getfixturevalue("redis_url")
    return {"type": "redis", "url": url, "namespace": unique_namespace("ryw")}


def test_an_immediate_repeat_is_an_exact_hit_plain_and_streamed(
    tmp_path: Path, fake_upstream: FakeUpstream, store: Json
) -> None:
    """Read-your-writes: the answer is in the cache before the client has it, so a sync SDK
    loop that asks again at once always hits (it missed 1-3 % when the store was only a
    background task)."""
    with cached_gateway(tmp_path, fake_upstream.url, store) as url:
        client = sdk_client(url, "k", 30)
        results: dict[str, list[str]] = {"plain": [], "stream": []}
        for i in range(REPEATS):
            messages = [{"role": "user", "content": f"Plain question number {i}?"}]
            first = client.chat.completions.with_raw_response.create(
                model="fake-model", messages=messages
            )
            assert first.headers["x-gateway-cache"] == "miss"
            again = client.chat.completions.with_raw_response.create(
                model="fake-model", messages=messages
            )
            results["plain"].append(again.headers["x-gateway-cache"])
            assert again.parse().choices[0].message.content == (
                first.parse().choices[0].message.content
            )
        for i in range(REPEATS):
            messages = [{"role": "user", "content": f"Streamed question number {i}?"}]
            texts = []
            for _ in range(2):
                raw = client.chat.completions.with_raw_response.create(
                    model="fake-model", messages=messages, stream=True
                )
                texts.append("".join(c.choices[0].delta.content or "" for c in raw.parse()))
            results["stream"].append(raw.headers["x-gateway-cache"])
            assert texts[0] == texts[1] and texts[0]
    assert results["plain"] == ["hit-exact"] * REPEATS, results["plain"]
    assert results["stream"] == ["hit-exact"] * REPEATS, results["stream"]


def test_huge_near_duplicates_do_not_stall_the_event_loop(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    """Twenty concurrent 3 MB near-duplicate prompts with the cache on, while /healthz is
    polled from another process: the loop stays responsive and no prompt gets another's
    answer (the answers echo each prompt's tail)."""
    fake_upstream.defaults = Knobs(echo_tail=80)
    store = {"type": "sqlite", "path": str(tmp_path / "cache.sqlite3")}
    server = {"max_body_bytes": 16777216}
    with cached_gateway(tmp_path, fake_upstream.url, store, server) as url:
        done = burst(url, "fake-model", 12)
    assert [cache for *_, cache in done.answers] == ["hit-exact"] * CONCURRENT
    latencies, oversleeps = done.latencies(during=False), done.probes.oversleeps
    print(summary(latencies, oversleeps))
    assert stall_p99(latencies, oversleeps) < 0.050, summary(latencies, oversleeps)
