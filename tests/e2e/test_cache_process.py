"""The cache in a real gateway process (`python -m gateway serve`) behind the fake upstream,
driven by the real synchronous OpenAI SDK: what a client sees right after an answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.testing.fake_upstream import FakeUpstream
from tests.clients import sdk_client
from tests.resilience.test_redis_breakers import gateway_process, listening_url, unique_namespace

REPEATS = 200


def write_config(tmp_path: Path, fake_url: str, store: str, extra: str = "") -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"""
server: {{access_log: false}}
auth: {{admin_key_env: GATEWAY_ADMIN_KEY}}
providers:
  fake: {{type: openai, base_url: "{fake_url}", timeouts: {{connect: 2, read: 30, total: 60}}}}
models:
  - {{name: fake-model, provider: fake}}
cache:
  store: {store}
  embedder: {{type: hash}}
  defaults: {{enabled: true}}
resilience:
  retry: {{attempts: 1}}
{extra}
""",
        encoding="utf-8",
    )
    return path


@contextmanager
def cached_gateway(tmp_path: Path, fake_url: str, store: str, extra: str = "") -> Iterator[str]:
    config = write_config(tmp_path, fake_url, store, extra)
    log = tmp_path / "gateway.log"
    with gateway_process(config, log) as proc:
        yield listening_url(proc, log)


@pytest.fixture(params=["sqlite", "redis"])
def store_yaml(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"{{type: sqlite, path: '{tmp_path / 'cache.sqlite3'}'}}"
    url = request.getfixturevalue("redis_url")
    return f"{{type: redis, url: '{url}', namespace: '{unique_namespace('ryw')}'}}"


def test_an_immediate_repeat_is_an_exact_hit_plain_and_streamed(
    tmp_path: Path, fake_upstream: FakeUpstream, store_yaml: str
) -> None:
    """Read-your-writes: the answer is in the cache before the client has it, so a sync SDK
    loop that asks again at once always hits (it missed 1-3 % when the store was only a
    background task)."""
    with cached_gateway(tmp_path, fake_upstream.url, store_yaml) as url:
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
