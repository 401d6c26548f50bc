"""Per-tenant rate limits shared through a real Redis: two limiters stand for two replicas and
see one budget; the token bucket holds its rate on the real clock; Redis down fails open."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.config.rate_limits import RateLimitConfig
from gateway.config.redis import RedisTarget
from gateway.ratelimit import RateLimited, RateLimiter
from gateway.testing.harness.process import free_port
from gateway.testing.harness.redis_server import redis_server, redis_server_path
from tests.test_ratelimit import admitted


def storage(url: str) -> RedisTarget:
    """Each test its own keys in the session's Redis."""
    return RedisTarget(url, namespace=f"rl-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[RateLimiter, RateLimiter]]:
    shared = storage(redis_url)
    pair = RateLimiter(shared), RateLimiter(shared)
    yield pair
    for limiter in pair:
        await limiter.aclose()


async def test_replicas_share_one_bucket(replicas: tuple[RateLimiter, RateLimiter]) -> None:
    a, b = replicas
    limits = RateLimitConfig(requests_per_second=0.25, burst=5)  # nothing refills meanwhile
    assert await admitted(a, limits, 3) == 3
    assert await admitted(b, limits, 5) == 2
    with pytest.raises(RateLimited) as caught:
        await a.acquire("acme", limits)
    assert caught.value.limit == "requests_per_second"
    assert caught.value.headers["Retry-After"] in {"4", "3"}  # 4 s less the time spent so far
    await b.acquire("globex", limits)  # another tenant, another bucket


async def test_replicas_share_the_slots(replicas: tuple[RateLimiter, RateLimiter]) -> None:
    a, b = replicas
    limits = RateLimitConfig(concurrent=2)
    first, second = await a.acquire("acme", limits), await a.acquire("acme", limits)
    with pytest.raises(RateLimited) as caught:
        await b.acquire("acme", limits)
    assert caught.value.limit == "concurrent"
    assert caught.value.headers["Retry-After"] == "1"
    await first.release()
    await first.release()
    async with await b.acquire("acme", limits):
        with pytest.raises(RateLimited):
            await a.acquire("acme", limits)
    await second.release()
    assert await admitted(b, limits, 3) == 2


async def test_replicas_share_the_minute(replicas: tuple[RateLimiter, RateLimiter]) -> None:
    a, b = replicas
    limits = RateLimitConfig(tokens_per_minute=1000)
    async with await a.acquire("acme", limits, 500) as permit:
        await permit.record_tokens(300)
    await b.acquire("acme", limits, 200)
    with pytest.raises(RateLimited) as caught:
        await b.acquire("acme", limits, 100)
    assert caught.value.limit == "tokens_per_minute"
    assert caught.value.type == "tokens"
    assert 1 <= int(caught.value.headers["Retry-After"]) <= 120


async def test_a_refused_request_consumes_nothing(
    replicas: tuple[RateLimiter, RateLimiter],
) -> None:
    a, b = replicas
    limits = RateLimitConfig(requests_per_second=0.25, burst=2, concurrent=1)
    permit = await a.acquire("acme", limits)
    for _ in range(5):
        with pytest.raises(RateLimited):
            await b.acquire("acme", limits)
    await permit.release()
    await b.acquire("acme", limits)  # the second token is still there


async def test_a_cancelled_request_releases_its_slot(
    replicas: tuple[RateLimiter, RateLimiter],
) -> None:
    a, b = replicas
    limits = RateLimitConfig(concurrent=1)
    entered = asyncio.Event()

    async def request() -> None:
        async with await a.acquire("acme", limits):
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(request())
    await entered.wait()
    with pytest.raises(RateLimited):
        await b.acquire("acme", limits)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with await b.acquire("acme", limits):
        pass


async def test_a_slot_never_released_expires(redis_url: str) -> None:
    """A replica that crashed holding a slot does not hold it forever."""
    shared = storage(redis_url)
    crashed, alive = RateLimiter(shared, slot_ttl_seconds=0.3), RateLimiter(shared)
    limits = RateLimitConfig(concurrent=1)
    try:
        await crashed.acquire("acme", limits)  # never released
        with pytest.raises(RateLimited):
            await alive.acquire("acme", limits)
        await asyncio.sleep(0.4)
        async with await alive.acquire("acme", limits):
            pass
    finally:
        await crashed.aclose()
        await alive.aclose()


async def test_scripts_are_loaded_again_after_a_flush(
    replicas: tuple[RateLimiter, RateLimiter], redis_url: str
) -> None:
    a, _ = replicas
    limits = RateLimitConfig(requests_per_second=100, tokens_per_minute=10_000)
    permit = await a.acquire("acme", limits, 10)
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    await permit.record_tokens(5)
    await a.acquire("acme", limits, 10)


async def test_the_bucket_holds_its_rate_on_the_real_clock(
    replicas: tuple[RateLimiter, RateLimiter],
) -> None:
    """Four workers on two replicas hammer a 20/s bucket of 1 for 3 s: 1 + 60 pass, within 10%."""
    limits = RateLimitConfig(requests_per_second=20, burst=1)
    seconds = 3.0
    deadline = time.monotonic() + seconds
    counts = [0, 0, 0, 0]

    async def hammer(limiter: RateLimiter, worker: int) -> None:
        while time.monotonic() < deadline:
            try:
                await limiter.acquire("acme", limits)
            except RateLimited:
                continue
            counts[worker] += 1

    a, b = replicas
    await asyncio.gather(*(hammer(limiter, i) for i, limiter in enumerate([a, b, a, b])))
    expected = 1 + 20 * seconds
    assert abs(sum(counts) - expected) <= 0.1 * expected, counts
    assert counts[0] + counts[2] > 0 and counts[1] + counts[3] > 0  # both replicas got some


async def test_redis_down_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(storage(f"redis://127.0.0.1:{free_port()}/0"))
    limits = RateLimitConfig(requests_per_second=1, concurrent=1, tokens_per_minute=10)
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.ratelimit"):
            for _ in range(50):
                async with await limiter.acquire("acme", limits, 100) as permit:
                    await permit.record_tokens(100)
    finally:
        await limiter.aclose()
    assert time.monotonic() - started < 1.0
    warnings = [r for r in caplog.records if r.name == "gateway.ratelimit"]
    assert len(warnings) == 1
    assert "admitting requests unlimited" in warnings[0].getMessage()


async def test_redis_going_away_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    """Enforced while Redis is up; once it stops, requests are admitted (one warning)."""
    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH")
    limits = RateLimitConfig(requests_per_second=0.25, burst=1, concurrent=1)
    with redis_server() as server:
        url = server.url
        limiter = RateLimiter(storage(url))
        permit = await limiter.acquire("acme", limits)
        with pytest.raises(RateLimited):
            await limiter.acquire("acme", limits)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.ratelimit"):
            await permit.release()
            assert await admitted(limiter, limits, 10) == 10
    finally:
        await limiter.aclose()
    assert len([r for r in caplog.records if r.name == "gateway.ratelimit"]) == 1


async def test_an_acquire_cancelled_in_flight_gives_its_slot_back(
    replicas: tuple[RateLimiter, RateLimiter],
) -> None:
    """Cancelled while the script runs in Redis: the slot it may have taken is released."""
    a, b = replicas
    limits = RateLimitConfig(concurrent=1)
    task = asyncio.create_task(a.acquire("acme", limits))
    await asyncio.sleep(0)  # the acquire has begun (its connection and script on the way)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.3)  # the script ran by now (and the slot was given back)
    async with await b.acquire("acme", limits):
        pass


async def test_a_fan_out_is_shared_and_may_leave_debt(
    replicas: tuple[RateLimiter, RateLimiter],
) -> None:
    a, b = replicas
    limits = RateLimitConfig(requests_per_second=0.25, burst=2)
    permit = await a.acquire("acme", limits)
    await permit.charge(5)  # six calls on a bucket of two: admitted, then in debt
    with pytest.raises(RateLimited) as caught:
        await b.acquire("acme", limits)
    assert int(caught.value.headers["Retry-After"]) >= 19  # 5 in debt + 1 at 0.25/s
