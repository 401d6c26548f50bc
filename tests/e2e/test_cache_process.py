"""The cache in a real gateway process (`python -m gateway serve`) behind the fake upstream,
driven by the real synchronous OpenAI SDK: what a client sees right after an answer."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.starters import start_gateway
from tests.clients import sdk_client
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


POLLER = """
import http.client, json, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conn = http.client.HTTPConnection(host, port, timeout=10)
latencies, end = [], time.monotonic() + seconds
print("ready", flush=True)
while time.monotonic() < end:
    started = time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    latencies.append(time.perf_counter() - started)
    time.sleep(0.005)
print(json.dumps(latencies), flush=True)
"""
HUGE = 3 * 1024 * 1024
CONCURRENT = 20


def _huge_prompt(i: int) -> str:
    """3 MB that twenty prompts share, differing only near the end."""
    words = (
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
        "incididunt ut labore et dolore magna aliqua Ünïcödé café "
    )
    body = (words * (HUGE // len(words) + 1))[:HUGE]
    return f"{body}\nQuestion {i}: what does clause {1000 + i} say? Thanks."


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
        host, port = url.removeprefix("http://").split(":")
        bodies = [
            orjson.dumps({"model": "fake-model", "messages": [{"role": "user", "content": p}]})
            for p in (_huge_prompt(i) for i in range(CONCURRENT))
        ]
        poller = subprocess.Popen(
            [sys.executable, "-c", POLLER, host, port, "12"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"
            time.sleep(0.5)  # a baseline before the burst

            def post(body: bytes) -> tuple[int, dict[str, Any], str]:
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                conn.request(
                    "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
                )
                resp = conn.getresponse()
                data = orjson.loads(resp.read())
                conn.close()
                return resp.status, data, resp.headers.get("x-gateway-cache", "")

            for _ in range(2):  # the second round repeats every prompt: exact hits
                with ThreadPoolExecutor(CONCURRENT) as pool:
                    answers = list(pool.map(post, bodies))
                for i, (status, data, _) in enumerate(answers):
                    assert status == 200, data
                    tail = _huge_prompt(i)[-80:]
                    assert data["choices"][0]["message"]["content"] == f"Echo: {tail}"
            assert [cache for *_, cache in answers] == ["hit-exact"] * CONCURRENT
            latencies = json.loads(poller.communicate(timeout=30)[0].strip().splitlines()[-1])
        finally:
            if poller.poll() is None:
                poller.kill()
                poller.wait()
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"healthz: {len(latencies)} polls, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
    )
    assert p99 < 0.050, f"/healthz p99 {p99 * 1000:.1f} ms"
