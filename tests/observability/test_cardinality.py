"""/metrics stays bounded under hostile traffic: 10,000 requests with random model names,
bearer keys, request ids, `user` fields and paths leave the series count where 1,000 left it,
and no random string reaches a label."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gateway.testing.harness.inprocess import GatewayServer

CONCURRENCY = 50
REAL_CHAT = ("demo",)
REAL_EMBEDDING = ("demo-embedding",)


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _requests(count: int, rng: random.Random, sent: set[str]) -> Iterator[tuple[str, str, dict]]:
    """(path, json body, headers) of each request; every kind appears in every 1,000."""

    def token() -> str:
        value = uuid.UUID(int=rng.getrandbits(128)).hex
        sent.add(value)
        return value

    for i in range(count):
        headers = {"Authorization": f"Bearer sk-{token()}", "x-request-id": token()}
        kind = i % 10
        if kind < 6:  # an unknown model (a 404, model label "none")
            body = {"model": f"gpt-{token()}", "messages": [{"role": "user", "content": "hi"}]}
            yield "/v1/chat/completions", body, headers
        elif kind < 8:  # a real model, a random user
            body = {
                "model": rng.choice(REAL_CHAT),
                "messages": [{"role": "user", "content": f"hello {token()}"}],
                "user": token(),
            }
            yield "/v1/chat/completions", body, headers
        elif kind == 8:  # embeddings of a real and of an unknown model
            model = rng.choice(REAL_EMBEDDING) if rng.random() < 0.5 else token()
            yield "/v1/embeddings", {"model": model, "input": token()}, headers
        else:  # an unknown path
            yield f"/v1/{token()}", {"model": token()}, headers


async def _send(gw: GatewayServer, batch: list[tuple[str, str, dict]]) -> dict[int, int]:
    statuses: dict[int, int] = {}
    queue = iter(batch)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            for path, body, headers in queue:
                async with session.post(gw.url + path, json=body, headers=headers) as resp:
                    await resp.read()
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return statuses


async def _scrape(gw: GatewayServer) -> str:
    async with aiohttp.ClientSession() as session, session.get(gw.url + "/metrics") as resp:
        return await resp.text()


async def test_series_stay_bounded_under_random_client_strings(gw: GatewayServer) -> None:
    rng = random.Random(7)
    sent: set[str] = set()
    batch = list(_requests(10_000, rng, sent))
    started = time.monotonic()
    await _scrape(gw)  # the metrics endpoint's own series exist before counting

    first = await _send(gw, batch[:1_000])
    after_1k = _series(await _scrape(gw))
    rest = await _send(gw, batch[1_000:])
    text = await _scrape(gw)
    after_10k = _series(text)
    elapsed = time.monotonic() - started

    statuses = {s: first.get(s, 0) + rest.get(s, 0) for s in {*first, *rest}}
    assert sum(statuses.values()) == 10_000 and statuses.get(200) and statuses.get(404)
    assert set(after_10k) == set(after_1k), (
        f"series grew with the request count: {sorted(set(after_10k) - set(after_1k))[:10]}"
    )
    # The counters did move: the same series, larger values.
    requests = [k for k in after_10k if k[0] == "gateway_requests_total"]
    assert sum(after_10k[k] for k in requests) >= sum(after_1k[k] for k in requests) + 9_000
    labels = {value for _, pairs in after_10k for _, value in pairs}
    assert not labels & sent, "a client string became a label value"
    leaked = [value for value in sent if value in text]
    assert not leaked, f"client strings in /metrics: {leaked[:5]}"
    assert elapsed < 60, f"10,000 requests took {elapsed:.1f} s"
