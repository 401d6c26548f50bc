"""The shared response store (gateway/responses/redis_store.py) against a real redis-server:
two stores are two replicas; an outage is a 503 on reads, a logged and counted failed put, and
"responses" unreachable in the shared state /readyz reports."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import openai
import pytest
import redis.asyncio as aioredis

from gateway.config.redis import RedisTarget
from gateway.config.resilience import BreakerConfig
from gateway.config.responses import Quota, ResponsesConfig
from gateway.ratelimit import RateLimiter
from gateway.resilience.breaker import Breakers
from gateway.responses.redis_store import RedisResponseStore
from gateway.responses.store import StoreUnavailable, build_response_store, new_response_id
from gateway.state.shared import SharedState
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import ServerThread, running_gateway
from gateway.testing.harness.redis_server import redis_server, redis_server_path
from gateway.testing.harness.sync_http import get_json, http
from tests.clients import sdk_client
from tests.responses.test_store import stored

TTL = 3600


@pytest.fixture
def namespace() -> str:
    return f"test:{uuid.uuid4().hex[:8]}:responses"  # each test its own keys


@pytest.fixture
async def replicas(
    redis_url: str, namespace: str
) -> AsyncIterator[tuple[RedisResponseStore, RedisResponseStore]]:
    pair = (
        RedisResponseStore(redis_url, namespace, TTL),
        RedisResponseStore(redis_url, namespace, TTL),
    )
    for store in pair:
        await store.start()
    yield pair
    for store in pair:
        await store.close()


async def test_what_one_replica_stores_the_other_reads_and_deletes(
    replicas: tuple[RedisResponseStore, RedisResponseStore],
) -> None:
    a, b = replicas
    one = stored()
    rid = one.response["id"]
    await a.put("acme", one)
    assert await b.get("acme", rid) == one
    assert await b.delete("acme", rid) is True
    assert await a.get("acme", rid) is None
    assert await a.delete("acme", rid) is False


async def test_another_tenant_gets_what_an_unknown_id_gets(
    replicas: tuple[RedisResponseStore, RedisResponseStore],
) -> None:
    a, b = replicas
    mine = stored("mine")
    rid = mine.response["id"]
    await a.put("team-a", mine)
    assert await b.get("team-b", rid) is None
    assert await b.get("team-b", new_response_id()) is None
    assert await b.delete("team-b", rid) is False
    assert await a.get("team-a", rid) == mine


async def test_keys_expire_at_the_ttl_and_name_no_tenant_or_id(
    redis_url: str, namespace: str
) -> None:
    config = ResponsesConfig.model_validate({"ttl_seconds": TTL, "store": {"type": "redis"}})
    store = build_response_store(config, RedisTarget(redis_url, namespace))
    assert isinstance(store, RedisResponseStore) and store.shared
    await store.start()
    client = aioredis.Redis.from_url(redis_url)
    try:
        one = stored()
        await store.put("tenant-with-a-name", one)
        keys = [k.decode() async for k in client.scan_iter(match=f"{namespace}:*")]
        # the row, its owner pointer, and the owner's rows and sizes (its quota's count)
        assert len(keys) == 4
        (key,) = [k for k in keys if ":" not in k.removeprefix(f"{namespace}:")]
        assert key.startswith(f"{namespace}:") and len(key) == len(namespace) + 1 + 64
        for name in keys:
            assert "tenant-with-a-name" not in name and one.response["id"] not in name
            assert TTL - 5 <= await client.ttl(name) <= TTL
        long = stored("x" * 2_000_000)  # 6 MB with its copies: one value, nothing cut
        assert await store.put("acme", long) is True
        assert await store.get("acme", long.response["id"]) == long
        # past max_response_bytes (8 MiB by default) a response is not kept, nor a key made
        assert await store.put("acme", stored("x" * 3_000_000)) is False
        assert len([k async for k in client.scan_iter(match=f"{namespace}:*")]) == 8
    finally:
        await client.aclose()
        await store.close()


async def test_a_tenants_quota_is_counted_in_redis_for_every_replica(
    redis_url: str, namespace: str
) -> None:
    """Three responses per tenant, written through two replicas: the fourth is refused on
    either, another tenant is unaffected, a delete frees a place, and expired rows leave the
    count."""
    three = Quota(max_responses=3, max_bytes=None)
    a, b = (
        RedisResponseStore(redis_url, namespace, TTL, quotas=lambda tenant: three),
        RedisResponseStore(redis_url, namespace, 1, quotas=lambda tenant: three),
    )
    for store in (a, b):
        await store.start()
    try:
        kept = [stored(f"q{i}") for i in range(3)]
        for response in kept:
            assert await a.put("acme", response) is True
        assert await b.put("acme", stored("a fourth")) is False  # the other replica counts too
        assert b.refused["storage_quota_exceeded"] == 1 and b.usage("acme")[0] == 3
        assert await b.put("globex", stored("theirs")) is True  # another tenant's own quota
        assert await b.delete("acme", kept[0].response["id"]) is True
        assert await a.put("acme", stored("in its place")) is True
        assert await a.put("acme", stored("one too many")) is False
        # rows written with b's 1 s TTL expire, and leave the count with them
        assert await a.delete("acme", kept[1].response["id"]) is True
        assert await b.put("acme", stored("short-lived")) is True
        assert await a.put("acme", stored("no room")) is False
        await asyncio.sleep(1.2)
        assert await a.put("acme", stored("room again")) is True
        assert a.usage("acme")[0] == 3
    finally:
        for store in (a, b):
            await store.close()


async def test_an_outage_is_a_503_on_reads_and_a_counted_failed_put(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH")
    failed: list[str] = []
    with redis_server() as server:
        store = RedisResponseStore(server.url, "gw:responses", TTL, on_failure=failed.append)
        await store.start()
        shared = SharedState.of(None, Breakers(BreakerConfig(), None), RateLimiter(None), store)
        try:
            kept = stored("before")
            await store.put("acme", kept)
            assert await store.get("acme", kept.response["id"]) == kept
            assert shared.states() == {"responses": True}

            server.stop()
            with caplog.at_level(logging.WARNING, "gateway.responses"):
                with pytest.raises(StoreUnavailable) as info:
                    await store.get("acme", kept.response["id"])
                await store.put("acme", stored("during"))  # does not raise
                with pytest.raises(StoreUnavailable):
                    await store.delete("acme", kept.response["id"])
            assert info.value.status == 503
            assert info.value.body()["error"]["code"] == "store_unavailable"
            assert info.value.headers == {"Retry-After": "1"}
            assert failed == ["get", "put", "delete"]
            assert store.failures == {"get": 1, "put": 1, "delete": 1}
            warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.responses"]
            assert len(warnings) == 1, warnings  # one per interval, not one per call
            assert "stored responses: Redis get failed" in warnings[0]
            assert shared.states() == {"responses": False}

            server.start()  # back, empty (nothing persisted)
            await store.probe_redis()  # what SharedState.watch does once a second
            assert shared.states() == {"responses": True}
            after = stored("after")
            await store.put("acme", after)
            assert await store.get("acme", after.response["id"]) == after
        finally:
            await store.close()


def test_a_gateway_on_the_redis_store_reports_an_outage_and_counts_its_failures(
    server_thread: ServerThread, fake: FakeUpstream, fake_upstream: FakeUpstream
) -> None:
    """The store as the app wires it: /readyz lists "responses", a retrieve in the outage is a
    503 the SDK sees as such, a create is still answered (its put counted as failed)."""
    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH")
    with redis_server() as server:
        extra = {
            "responses": {"store": {"type": "redis"}},
            "redis": {"url": server.url, "namespace": f"gw-{uuid.uuid4().hex[:8]}"},
        }
        with running_gateway(server_thread, settings_for(fake.url, extra)) as gw:
            client = sdk_client(gw.url)
            created = client.responses.create(model="fake-model", input="hello")
            assert client.responses.retrieve(created.id).id == created.id
            ready = get_json(gw.url + "/readyz")
            assert ready["status"] == "ready" and ready["shared_state"] == {"responses": "ok"}

            server.stop()
            with pytest.raises(openai.InternalServerError) as info:
                client.responses.retrieve(created.id)
            assert info.value.status_code == 503
            assert info.value.code == "store_unavailable"
            answered = client.responses.create(model="fake-model", input="during the outage")
            assert answered.status == "completed"
            ready = get_json(gw.url + "/readyz")
            assert ready["status"] == "degraded"
            assert ready["shared_state"] == {"responses": "unreachable"}
            text = http("GET", gw.url + "/metrics").body.decode()
            for operation in ("get", "put"):
                line = f'gateway_response_store_failures_total{{operation="{operation}"}} 1.0'
                assert line in text, operation
