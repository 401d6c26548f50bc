"""The shared Redis store against a real redis-server: two stores are two replicas."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.cache.redis_store import RedisStore
from tests.cache.entries import entry as make_entry
from tests.cache.entries import vector as unit_vector


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "not replicated in time"
        await asyncio.sleep(0.02)


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    namespace = f"test:{uuid.uuid4().hex[:8]}"  # each test its own keys on the shared server
    a = RedisStore(redis_url, namespace, max_entries=50, approximate_above=1000)
    b = RedisStore(redis_url, namespace, max_entries=50, approximate_above=1000)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_a_write_on_one_replica_is_read_on_the_other(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    await a.put(make_entry(1))
    now = time.time()
    exact = await b.get("s:1", now)  # the exact tier reads Redis directly: no lag
    assert exact is not None and exact.response == {"answer": 1} and exact.text == "question 1"

    async def found_semantically() -> bool:
        return bool(await b.search("s", unit_vector(1), "e", 1, time.time()))

    await _until(found_semantically)
    ((entry, similarity),) = await b.search("s", unit_vector(1), "e", 1, time.time())
    assert entry.exact_key == "s:1" and similarity == pytest.approx(1.0, abs=1e-5)
    assert await b.search("other-scope", unit_vector(1), "e", 1, time.time()) == []
    assert await b.search("s", unit_vector(1), "other-embedder", 1, time.time()) == []
    assert b.lags and max(b.lags) < 5


async def test_a_replaced_answer_is_never_served_stale(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    await a.put(make_entry(1))
    await _until(lambda: _has(b, "s:1"))
    newer = make_entry(1)
    newer.response = {"answer": "new"}
    await b.put(newer)
    for store in (a, b):
        got = await store.get("s:1", time.time())
        assert got is not None and got.response == {"answer": "new"}
        hits = await store.search("s", unit_vector(1), "e", 4, time.time())
        assert [h.response for h, _ in hits] in ([{"answer": "new"}], [])
    assert len(a) == len(b) == 1 or await _settles(a, b, 1)


async def test_a_purge_through_one_replica_is_seen_by_all(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    for n in range(6):
        await a.put(make_entry(n, tenant="x" if n % 2 else "y"))
    await _settles(a, b, 6)
    assert await b.purge(tenant="x") == 3
    assert await a.get("s:1", time.time()) is None
    assert await a.get("s:2", time.time()) is not None
    await _settles(a, b, 3)
    assert (await a.stats()).by_tenant == {"y": 3}


async def test_expired_entries_are_not_served_and_are_swept(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    await a.put(make_entry(1, ttl=0.3))
    await a.put(make_entry(2))
    await asyncio.sleep(0.4)
    now = time.time()
    assert await b.get("s:1", now) is None
    assert [e.exact_key for e, _ in await b.search("s", unit_vector(1), "e", 4, now)] != ["s:1"]
    assert await a.evict(now) == 1
    await _settles(a, b, 1)


async def test_the_size_cap_holds_across_replicas(redis_url: str) -> None:
    namespace = f"test:{uuid.uuid4().hex[:8]}"
    a = RedisStore(redis_url, namespace, max_entries=10, approximate_above=1000)
    b = RedisStore(redis_url, namespace, max_entries=10, approximate_above=1000)
    await a.open()
    await b.open()
    try:
        for n in range(15):
            await (a if n % 2 else b).put(make_entry(n))
        await a.evict(time.time())
        await _settles(a, b, 10)
        assert await a.get("s:14", time.time()) is not None  # the newest stay
        assert await a.get("s:0", time.time()) is None  # the least recently used went
    finally:
        await a.close()
        await b.close()


async def test_a_late_replica_starts_from_a_snapshot(
    redis_url: str, replicas: tuple[RedisStore, RedisStore]
) -> None:
    a, _ = replicas
    for n in range(5):
        await a.put(make_entry(n))
    late = RedisStore(redis_url, a._prefix.removesuffix(":e:"), 50, 1000)
    await late.open()
    try:
        assert len(late) == 5 and late.synced
        assert (await late.search("s", unit_vector(3), "e", 1, time.time()))[0][
            0
        ].exact_key == "s:3"
    finally:
        await late.close()


async def test_redis_away_is_a_miss_and_the_replica_resyncs(tmp_path: object) -> None:
    from gateway.testing.harness.redis_server import redis_server, redis_server_path

    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH")
    with redis_server() as server:
        url = server.url
        store = RedisStore(url, "gone", max_entries=50, approximate_above=1000)
        await store.open()
        await store.put(make_entry(1))
    # the server is gone now
    with pytest.raises(Exception):  # noqa: B017 - the service turns any into a miss
        await store.get("s:1", time.time())
    await _until(lambda: _not_synced(store))
    await store.close()


async def _has(store: RedisStore, exact: str) -> bool:
    return exact in store._by_exact


async def _not_synced(store: RedisStore) -> bool:
    return not store.synced


async def _settles(a: RedisStore, b: RedisStore, n: int) -> bool:
    async def both() -> bool:
        return len(a) == n and len(b) == n

    await _until(both)
    return True


async def test_a_published_entry_is_served_here_at_once_and_everywhere_once_written(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    fresh = make_entry(1)
    a.publish(fresh)  # synchronous: nothing sent to Redis yet
    now = time.time()
    exact = asyncio.create_task(a.get("s:1", now))
    similar = asyncio.create_task(a.search("s", unit_vector(1), "e", 1, now))
    await asyncio.sleep(0.01)
    assert not exact.done() and not similar.done()  # found here, waiting for the write
    assert await b.get("s:1", now) is None and len(a) == 0
    id_ = await a.put(fresh)
    got = await exact
    assert got is not None and got.response == {"answer": 1}
    ((found, _),) = await similar
    assert found.exact_key == "s:1"
    assert id_ > 0 and a._by_exact["s:1"] == id_ and not a._pending
    got = await b.get("s:1", time.time())
    assert got is not None and got.response == {"answer": 1}
    await _settles(a, b, 1)


async def test_a_failed_write_withdraws_the_published_entry(tmp_path: object) -> None:
    from gateway.testing.harness.redis_server import redis_server, redis_server_path

    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH")
    fresh = make_entry(1)
    with redis_server() as server:
        url = server.url
        store = RedisStore(url, "withdrawn", max_entries=50, approximate_above=1000)
        await store.open()
        store.publish(fresh)
        waiting = asyncio.create_task(store.get("s:1", time.time()))
        await asyncio.sleep(0)
    with pytest.raises(Exception):  # noqa: B017 - Redis is gone
        await store.put(fresh)
    try:
        served = await waiting
    except Exception:  # it then read Redis, which is gone: a miss
        served = None
    assert served is None  # never served what Redis does not hold
    assert len(store) == 0 and not store._pending
    fresh = make_entry(2)
    store.synced = False  # as the follower reports it once it notices
    store.publish(fresh)
    assert fresh.id is None and not store._pending  # not even published meanwhile
    await store.close()


async def test_an_entrys_headers_reach_every_replica(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    fresh = make_entry(1)
    fresh.headers = {"x-gateway-level": "1", "x-gateway-knowledge-base": "handbook"}
    await a.put(fresh)
    got = await b.get("s:1", time.time())
    assert got is not None and got.headers == fresh.headers
    plain = make_entry(2)
    await a.put(plain)
    got = await b.get("s:2", time.time())
    assert got is not None and got.headers == {}
