"""The connection factory (gateway/state/redis.py): one pool per server, timeouts and event loop,
shared by the parts that ask for it, closed when the last one gives it back."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.cache.redis_store import RedisStore
from gateway.ratelimit import RateLimiter
from gateway.state.redis import RedisConnections, SharedClient, Timeouts

URL = "redis://127.0.0.1:6379/0"
FAST = Timeouts(socket=0.25, connect=0.25)


async def test_the_same_server_and_timeouts_share_one_client() -> None:
    pools = RedisConnections()
    a, b = pools.client(URL, FAST), pools.client(URL, FAST)
    assert a is b
    assert pools.client(URL, Timeouts(0.5, 0.5)) is not a, "other timeouts: another pool"
    assert pools.client(URL.replace("/0", "/1"), FAST) is not a
    assert pools.pools() == 3


async def test_the_pool_closes_when_its_last_user_gives_it_back() -> None:
    pools = RedisConnections()
    a, b = pools.client(URL, FAST), pools.client(URL, FAST)
    await pools.release(a)
    assert pools.pools() == 1, "one user left"
    await pools.release(b)
    assert pools.pools() == 0
    assert pools.client(URL, FAST) is not a, "a fresh pool once the old one is closed"
    with pytest.raises(ValueError, match="not handed out here"):
        await pools.release(a)


def test_each_event_loop_gets_its_own_pool() -> None:
    """An asyncio pool's connections belong to the loop they were made on."""
    pools = RedisConnections()

    async def take() -> object:
        return pools.client(URL, FAST)

    first, second = asyncio.run(take()), asyncio.run(take())
    assert first is not second


def test_blocking_clients_are_shared_too() -> None:
    pools = RedisConnections()
    a, b = pools.sync_client(URL, FAST), pools.sync_client(URL, FAST)
    assert a is b
    pools.release_sync(a)
    pools.release_sync(b)
    assert pools.pools() == 0


def test_a_part_takes_its_client_on_first_use_only() -> None:
    """Parts are built before the loop runs (build_app): the client is taken when used."""
    pools = RedisConnections()
    client = SharedClient(URL, FAST, pools)
    assert pools.pools() == 0

    async def use() -> None:
        assert client.redis is client.redis
        assert pools.pools() == 1
        await client.aclose()
        await client.aclose()  # idempotent

    asyncio.run(use())
    assert pools.pools() == 0


async def test_replicas_in_one_process_talk_through_one_pool(redis_url: str) -> None:
    """Two rate limiters (standing for two replicas) and a cache store on one server: the
    limiters share a pool, the store's lookups and its follower each have their own timeouts."""
    from gateway.config import RedisTarget
    from gateway.state.redis import CONNECTIONS

    before = CONNECTIONS.pools()
    target = RedisTarget(redis_url, "pool-test")
    limiters = RateLimiter(target), RateLimiter(target)
    store = RedisStore(redis_url, "pool-test:cache", max_entries=10, approximate_above=100)
    try:
        for limiter in limiters:
            assert limiter._redis is not None and await limiter._redis.ping()
        await store.open()
        assert store.redis_up and await store.get("nothing", time.time()) is None
        assert CONNECTIONS.pools() == before + 3  # limits (0.25 s), lookups (0.5 s), follower
    finally:
        for limiter in limiters:
            await limiter.aclose()
        await store.close()
    assert CONNECTIONS.pools() == before
