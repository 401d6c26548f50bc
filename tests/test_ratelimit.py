"""Per-tenant rate limits in memory, on a fake clock: the token bucket, requests in flight, the
sliding minute of tokens, and the 429 the client receives."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from gateway.config.rate_limits import RateLimitConfig, RateLimitStorageConfig
from gateway.ratelimit import RateLimited, RateLimiter
from gateway.ratelimit.memory import MIN_SWEEP, MemoryBackend
from gateway.ratelimit.window import tokens_wait


class Clock:
    def __init__(self, now: float = 1_200_000.0) -> None:  # a minute boundary
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limiter(clock: Clock) -> RateLimiter:
    return RateLimiter(clock=clock)


async def refused(limiter: RateLimiter, limits: RateLimitConfig, tokens: int = 0) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        await limiter.acquire("acme", limits, tokens)
    return caught.value


async def admitted(limiter: RateLimiter, limits: RateLimitConfig, count: int) -> int:
    """How many of `count` requests at this instant are admitted."""
    done = 0
    for _ in range(count):
        try:
            await limiter.acquire("acme", limits)
        except RateLimited:
            continue
        done += 1
    return done


# --- config ---------------------------------------------------------------------------------


def test_burst_defaults_to_the_rate_rounded_up() -> None:
    assert RateLimitConfig(requests_per_second=2.5).bucket_size == 3
    assert RateLimitConfig(requests_per_second=0.2).bucket_size == 1
    assert RateLimitConfig(requests_per_second=2, burst=10).bucket_size == 10
    assert RateLimitConfig().unlimited


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValidationError, match="burst needs requests_per_second"):
        RateLimitConfig(burst=3)
    with pytest.raises(ValidationError):
        RateLimitConfig(requests_per_second=0)
    with pytest.raises(ValidationError):
        RateLimitConfig(concurrency=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="redis://"):
        RateLimitStorageConfig(type="redis", url="http://localhost:6379")


# --- token bucket ---------------------------------------------------------------------------


async def test_a_full_bucket_admits_the_burst_then_refuses(
    limiter: RateLimiter, clock: Clock
) -> None:
    limits = RateLimitConfig(requests_per_second=2, burst=5)
    assert await admitted(limiter, limits, 8) == 5
    clock.advance(0.5)  # one token back
    assert await admitted(limiter, limits, 3) == 1
    clock.advance(60)  # refills to the burst, not beyond
    assert await admitted(limiter, limits, 10) == 5


async def test_the_bucket_refills_at_the_rate(limiter: RateLimiter, clock: Clock) -> None:
    limits = RateLimitConfig(requests_per_second=10, burst=1)
    total = 0
    for _ in range(1000):  # 10 s in 10 ms steps
        total += await admitted(limiter, limits, 3)
        clock.advance(0.01)
    assert total == 1 + 99  # the initial token, then one per 0.1 s (the last one not yet due)


async def test_retry_after_is_the_time_to_the_next_token(
    limiter: RateLimiter, clock: Clock
) -> None:
    limits = RateLimitConfig(requests_per_second=0.25, burst=1)  # one every 4 s
    await limiter.acquire("acme", limits)
    error = await refused(limiter, limits)
    assert error.status == 429
    assert error.headers == {"Retry-After": "4"}
    assert error.retry_after == 4
    assert error.type == "requests"
    assert error.code == "rate_limit_exceeded"
    assert error.body()["error"]["message"] == (
        "Rate limit reached for tenant 'acme' on requests per second: limit 0.25. "
        "Please retry in 4 s."
    )
    clock.advance(2.5)
    assert (await refused(limiter, limits)).headers["Retry-After"] == "2"  # 1.5 s, rounded up
    clock.advance(1.4)
    assert (await refused(limiter, limits)).headers["Retry-After"] == "1"  # 0.1 s: at least 1
    clock.advance(0.1)
    await limiter.acquire("acme", limits)


async def test_tenants_have_their_own_buckets(limiter: RateLimiter) -> None:
    limits = RateLimitConfig(requests_per_second=1)
    await limiter.acquire("acme", limits)
    await limiter.acquire("globex", limits)
    await refused(limiter, limits)


async def test_a_refused_request_consumes_nothing(limiter: RateLimiter, clock: Clock) -> None:
    """Refused on concurrency, it takes no token from the bucket and no tokens from the minute."""
    limits = RateLimitConfig(requests_per_second=1, burst=2, concurrent=1, tokens_per_minute=100)
    permit = await limiter.acquire("acme", limits, 40)
    error = await refused(limiter, limits, 40)
    assert error.limit == "concurrent"
    assert error.headers["Retry-After"] == "1"
    await permit.release()
    async with await limiter.acquire("acme", limits, 40):  # a token and 40 tokens were left
        pass
    error = await refused(limiter, limits, 20)  # 20 tokens fit, but the bucket is empty
    assert error.limit == "requests_per_second"


async def test_the_limit_that_clears_last_is_reported(limiter: RateLimiter, clock: Clock) -> None:
    limits = RateLimitConfig(requests_per_second=1, tokens_per_minute=100)
    await limiter.acquire("acme", limits, 100)
    error = await refused(limiter, limits, 10)
    assert error.limit == "tokens_per_minute"
    assert error.type == "tokens"
    assert "on tokens per minute: limit 100." in error.message


# --- requests in flight ---------------------------------------------------------------------


async def test_concurrency_slots_are_released(limiter: RateLimiter) -> None:
    limits = RateLimitConfig(concurrent=2)
    first = await limiter.acquire("acme", limits)
    second = await limiter.acquire("acme", limits)
    error = await refused(limiter, limits)
    assert error.limit == "concurrent"
    assert "on concurrent requests: limit 2." in error.message
    await first.release()
    await first.release()  # twice frees one slot
    third = await limiter.acquire("acme", limits)
    await refused(limiter, limits)
    await second.release()
    await third.release()
    assert await admitted(limiter, limits, 3) == 2


async def test_a_failing_request_releases_its_slot(limiter: RateLimiter) -> None:
    limits = RateLimitConfig(concurrent=1)
    with pytest.raises(ZeroDivisionError):
        async with await limiter.acquire("acme", limits):
            1 / 0  # noqa: B018
    async with await limiter.acquire("acme", limits):
        pass


async def test_a_cancelled_request_releases_its_slot(limiter: RateLimiter) -> None:
    limits = RateLimitConfig(concurrent=1)
    entered = asyncio.Event()

    async def request() -> None:
        async with await limiter.acquire("acme", limits):
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(request())
    await entered.wait()
    await refused(limiter, limits)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with await limiter.acquire("acme", limits):
        pass


async def test_unlimited_tenants_hold_nothing(limiter: RateLimiter) -> None:
    permit = await limiter.acquire("acme", RateLimitConfig(), 10**9)
    assert not permit.holds_slot
    await permit.record_tokens(10**9)
    await permit.release()


# --- tokens per minute ----------------------------------------------------------------------


async def test_tokens_count_the_estimate_and_the_completion(
    limiter: RateLimiter, clock: Clock
) -> None:
    limits = RateLimitConfig(tokens_per_minute=1000)
    async with await limiter.acquire("acme", limits, 300) as permit:
        await permit.record_tokens(400)
    await limiter.acquire("acme", limits, 300)  # 1000 used
    error = await refused(limiter, limits, 1)
    assert error.limit == "tokens_per_minute"
    # The next minute starts in 60 s; 1 token fits once 1/1000 of it slid out: 0.06 s later.
    assert error.headers["Retry-After"] == "61"
    clock.advance(60.06)
    await limiter.acquire("acme", limits, 1)


async def test_the_minute_slides(limiter: RateLimiter, clock: Clock) -> None:
    limits = RateLimitConfig(tokens_per_minute=600)
    clock.advance(30)
    await limiter.acquire("acme", limits, 600)  # mid-minute
    clock.advance(30)  # next minute: 600 of the previous, weighted 1.0 -> full
    error = await refused(limiter, limits, 100)
    assert error.headers["Retry-After"] == "10"  # weighted 500 after 10 s
    clock.advance(9.9)
    await refused(limiter, limits, 100)
    clock.advance(0.1)
    await limiter.acquire("acme", limits, 100)
    clock.advance(30)  # previous 600 weighted 1/3 (200) + 100: 300 free
    await limiter.acquire("acme", limits, 300)
    await refused(limiter, limits, 10)
    clock.advance(120)  # both minutes gone
    await limiter.acquire("acme", limits, 600)


async def test_a_request_larger_than_the_limit_waits_for_an_empty_minute(
    limiter: RateLimiter, clock: Clock
) -> None:
    limits = RateLimitConfig(tokens_per_minute=100)
    await limiter.acquire("acme", limits, 5000)
    error = await refused(limiter, limits, 5000)
    assert error.headers["Retry-After"] == "120"
    clock.advance(120)
    await limiter.acquire("acme", limits, 5000)


def test_tokens_wait_arithmetic() -> None:
    assert tokens_wait(0, 0, 0, 10, 100) == 0
    assert tokens_wait(0, 90, 15, 10, 100) == 0
    assert tokens_wait(0, 95, 15, 10, 100) == pytest.approx(45 + 60 * 5 / 95)
    assert tokens_wait(100, 0, 0, 50, 100) == pytest.approx(30)  # half of previous out
    assert tokens_wait(100, 0, 20, 50, 100) == pytest.approx(10)


# --- a request that fans out (legacy completions: prompts x n) --------------------------------


async def test_a_fan_out_counts_each_call_as_a_request(limiter: RateLimiter) -> None:
    limits = RateLimitConfig(requests_per_second=1, burst=5)
    permit = await limiter.acquire("acme", limits)
    await permit.charge(3)  # four calls in all
    assert await admitted(limiter, limits, 5) == 1


async def test_a_fan_out_larger_than_the_burst_leaves_the_bucket_in_debt(
    limiter: RateLimiter, clock: Clock
) -> None:
    limits = RateLimitConfig(requests_per_second=1, burst=2)
    permit = await limiter.acquire("acme", limits)
    await permit.charge(9)  # ten calls: admitted once, and paid for before the next request
    caught = await refused(limiter, limits)
    assert caught.limit == "requests_per_second" and caught.retry_after == 9
    clock.advance(8.5)
    await refused(limiter, limits)
    clock.advance(0.5)
    assert await admitted(limiter, limits, 1) == 1


async def test_a_fan_out_the_bucket_cannot_pay_now_is_refused_and_counts_nothing(
    limiter: RateLimiter, clock: Clock
) -> None:
    limits = RateLimitConfig(requests_per_second=1, burst=4)
    await limiter.acquire("acme", limits)
    permit = await limiter.acquire("acme", limits)  # the bucket holds 2 now
    with pytest.raises(RateLimited) as caught:
        await permit.charge(3)
    assert caught.value.limit == "requests_per_second"
    assert await admitted(limiter, limits, 3) == 2, "the refused charge took nothing"


async def test_a_fan_out_is_not_refused_for_the_slot_its_request_holds(
    limiter: RateLimiter,
) -> None:
    limits = RateLimitConfig(concurrent=1, tokens_per_minute=1000)
    async with await limiter.acquire("acme", limits, 10) as permit:
        await permit.charge(5, 100)
    caught = await refused(limiter, limits, tokens=900)
    assert caught.limit == "tokens_per_minute", "the fan-out's tokens were counted"


# --- memory ---------------------------------------------------------------------------------


async def test_owners_at_rest_are_forgotten_and_memory_follows_the_active_ones(
    clock: Clock,
) -> None:
    """A client that makes up an owner per request (its own provider keys) must not grow the
    counters without end; an owner still limited keeps its state through a sweep."""
    backend = MemoryBackend(clock)
    limits = RateLimitConfig(requests_per_second=1, tokens_per_minute=1000)
    assert await backend.acquire("steady", limits, 10, None) is None  # bucket now empty
    for i in range(20_000):
        assert await backend.acquire(f"made-up-{i}", limits, 10, None) is None
        clock.advance(0.1)  # 2,000 s in all: each made-up owner rests after a minute or two
    assert backend.held() < 4 * MIN_SWEEP
    # Within its minute and bucket, an owner is kept and still refused.
    assert await backend.acquire("busy", limits, 10, None) is None
    for i in range(3 * MIN_SWEEP):
        await backend.acquire(f"flood-{i}", limits, 10, None)
    refusal = await backend.acquire("busy", limits, 10, None)
    assert refusal is not None and refusal.limit == "requests_per_second"
