"""One tenant's rate limit enforced by three replicas together, through one Redis
(`rate_limits.storage: {type: redis}`): a token bucket of N requests/s and burst B admits
B + N*T requests in T seconds across all three (within 10%), not that many per replica.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import pytest

from gateway.testing.fake_upstream import FakeUpstream
from tests.scaleout.cluster import Replica, ready_replicas
from tests.scaleout.cluster import base_config as base

RATE, BURST, SECONDS = 20, 15, 3.0
CLIENTS_PER_REPLICA = 3
KEYS = {"metered": "SO_RL_KEY_METERED"}
SECRET = "sk-scaleout-metered"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, fake: FakeUpstream
) -> Iterator[list[Replica]]:
    namespace = f"so-rl-{uuid.uuid4().hex[:12]}"
    config = base(
        fake.url,
        KEYS,
        models=[{"name": "quick", "provider": "fake", "upstream_model": "up-quick"}],
        redis={"url": redis_url, "namespace": namespace},
        rate_limits={
            "storage": {"type": "redis"},
            "tenants": {"metered": {"requests_per_second": RATE, "burst": BURST}},
        },
    )
    env = {KEYS["metered"]: SECRET}
    yield from ready_replicas(tmp_path_factory, "ratelimits", config, env)


@dataclass(frozen=True, slots=True)
class Sent:
    replica: str
    at: float  # seconds since the first send
    status: int
    headers: dict[str, str]
    body: bytes


def hammer(group: list[Replica], seconds: float) -> list[Sent]:
    """CLIENTS_PER_REPLICA clients per replica, each sending the next request as soon as the
    last is answered, for `seconds`."""

    async def run() -> list[Sent]:
        replies: list[Sent] = []
        headers = {"Authorization": f"Bearer {SECRET}"}
        body = {"model": "quick", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            start = time.monotonic()

            async def client(replica: Replica) -> None:
                url = replica.url + "/v1/chat/completions"
                while (at := time.monotonic() - start) < seconds:
                    async with session.post(url, json=body, headers=headers) as resp:
                        raw = await resp.read()
                        sent = Sent(replica.name, at, resp.status, dict(resp.headers), raw)
                        replies.append(sent)

            await asyncio.gather(*(client(r) for r in group for _ in range(CLIENTS_PER_REPLICA)))
        return replies

    return asyncio.run(run())


def test_three_replicas_share_one_token_bucket(
    cluster: list[Replica], fake_upstream: FakeUpstream
) -> None:
    replies = hammer(cluster, SECONDS)
    expected = BURST + RATE * SECONDS
    for reply in replies:
        if reply.status == 200:
            assert json.loads(reply.body)["choices"][0]["message"]["content"] == "Echo: hi"
            continue
        assert reply.status == 429, (reply.status, reply.body)
        error = json.loads(reply.body)["error"]
        assert error["code"] == "rate_limit_exceeded", error
        assert "requests per second" in error["message"], error
        assert int(reply.headers["Retry-After"]) >= 1, reply.headers
    admitted = Counter(r.replica for r in replies if r.status == 200)
    total = sum(admitted.values())
    print(
        f"{len(replies)} requests in {SECONDS} s, {total} admitted (expected {expected:g}): "
        f"{dict(admitted)}"
    )
    assert len(replies) > 3 * expected, f"the clients sent only {len(replies)} requests"
    assert abs(total - expected) <= 0.1 * expected, (
        f"admitted {total} across the three ({dict(admitted)}), expected {expected:g} +-10% "
        f"(three separate buckets would admit about {3 * expected:g})"
    )
    assert len(admitted) == 3, f"every replica admitted some: {dict(admitted)}"
    assert total == fake_upstream.stats["requests"], "every admitted request went upstream"
    early = sum(1 for r in replies if r.status == 200 and r.at < 0.25)
    assert early >= BURST, f"the burst of {BURST} is admitted at once (got {early} in 0.25 s)"
