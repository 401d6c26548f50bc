"""The circuit breaker driven from asyncio: what counts, when it opens, and the single trial."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import BreakerConfig
from gateway.errors import GatewayError, InvalidRequest, UpstreamError, UpstreamTimeout
from gateway.resilience.breaker import CLOSED, HALF_OPEN, OPEN, Breaker, BreakerOpen


def make(failures: int = 3, reset: float = 0.2, slow: float | None = None) -> Breaker:
    config = BreakerConfig(failures=failures, reset_seconds=reset, slow_call_seconds=slow)
    return Breaker("test", config)


def fail(breaker: Breaker, error: BaseException | None = None) -> None:
    with pytest.raises(type(error or UpstreamError("x"))), breaker.attempt():
        raise error or UpstreamError("boom")


def succeed(breaker: Breaker) -> None:
    with breaker.attempt():
        pass


def trip(breaker: Breaker, times: int) -> None:
    for _ in range(times):
        fail(breaker)


def test_opens_after_consecutive_failures() -> None:
    breaker = make(failures=3)
    trip(breaker, 2)
    assert breaker.state == CLOSED
    assert breaker.snapshot().failures == 2
    fail(breaker)
    assert breaker.state == OPEN


def test_a_success_resets_the_count() -> None:
    breaker = make(failures=3)
    trip(breaker, 2)
    succeed(breaker)
    trip(breaker, 2)
    assert breaker.state == CLOSED


@pytest.mark.parametrize(
    "error",
    [UpstreamError("5xx"), UpstreamTimeout("slow"), GatewayError("429", status=429)],
)
def test_upstream_faults_count(error: GatewayError) -> None:
    breaker = make(failures=1)
    fail(breaker, error)
    assert breaker.state == OPEN


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequest("bad"),
        UpstreamError("not found", status=404),
        ValueError("a gateway bug"),
    ],
)
def test_client_errors_and_bugs_do_not_count(error: Exception) -> None:
    breaker = make(failures=1)
    for _ in range(3):
        fail(breaker, error)
    assert breaker.state == CLOSED
    assert breaker.snapshot().failures == 0


def test_while_open_it_refuses_without_running_the_block() -> None:
    breaker = make(failures=1, reset=30)
    fail(breaker)
    ran = False
    with pytest.raises(BreakerOpen) as info, breaker.attempt():
        ran = True
    assert not ran
    assert info.value.name == "test"
    assert info.value.retry_in is not None and 29 < info.value.retry_in <= 30
    snapshot = breaker.snapshot()
    assert snapshot.state == OPEN and snapshot.opened_at is not None


async def test_after_reset_a_successful_trial_closes_it() -> None:
    breaker = make(failures=1, reset=0.1)
    fail(breaker)
    await asyncio.sleep(0.12)
    succeed(breaker)
    assert breaker.state == CLOSED
    assert breaker.snapshot().failures == 0
    fail(breaker)  # counting starts again from zero
    assert breaker.state == OPEN


async def test_a_failed_trial_opens_it_again_for_a_full_period() -> None:
    breaker = make(failures=1, reset=0.1)
    fail(breaker)
    await asyncio.sleep(0.12)
    fail(breaker)
    assert breaker.state == OPEN
    with pytest.raises(BreakerOpen), breaker.attempt():
        pass
    retry_in = breaker.snapshot().retry_in
    assert retry_in is not None and retry_in > 0.05


async def test_exactly_one_trial_under_concurrency() -> None:
    breaker = make(failures=1, reset=0.1)
    fail(breaker)
    await asyncio.sleep(0.12)
    release = asyncio.Event()
    entered = 0

    async def call() -> str:
        nonlocal entered
        try:
            with breaker.attempt():
                entered += 1
                await release.wait()
        except BreakerOpen:
            return "refused"
        return "ran"

    tasks = [asyncio.create_task(call()) for _ in range(50)]
    await asyncio.sleep(0.02)  # every task has tried to get in
    assert entered == 1
    release.set()
    outcomes = await asyncio.gather(*tasks)
    assert outcomes.count("ran") == 1
    assert outcomes.count("refused") == 49
    assert breaker.state == CLOSED


async def test_a_cancelled_trial_frees_the_slot_without_deciding() -> None:
    breaker = make(failures=1, reset=0.1)
    fail(breaker)
    await asyncio.sleep(0.12)

    async def hang() -> None:
        with breaker.attempt():
            await asyncio.sleep(10)

    task = asyncio.create_task(hang())
    await asyncio.sleep(0.01)
    with pytest.raises(BreakerOpen), breaker.attempt():
        pass
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert breaker.state != CLOSED  # the cancelled trial decided nothing
    succeed(breaker)  # the next call is the trial
    assert breaker.state == CLOSED


async def test_cancelled_calls_do_not_count() -> None:
    breaker = make(failures=1)

    async def hang() -> None:
        with breaker.attempt():
            await asyncio.sleep(10)

    for _ in range(3):
        task = asyncio.create_task(hang())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert breaker.state == CLOSED
    assert breaker.snapshot().failures == 0


async def test_slow_successes_count_as_failures() -> None:
    breaker = make(failures=2, slow=0.05)
    for _ in range(2):
        with breaker.attempt():
            await asyncio.sleep(0.07)
    assert breaker.state == OPEN


async def test_fast_successes_are_successes() -> None:
    breaker = make(failures=1, slow=1.0)
    for _ in range(3):
        with breaker.attempt():
            await asyncio.sleep(0)
    assert breaker.state == CLOSED


async def test_a_slow_trial_reopens_it() -> None:
    breaker = make(failures=1, reset=0.1, slow=0.05)
    fail(breaker)
    await asyncio.sleep(0.12)
    with breaker.attempt():
        await asyncio.sleep(0.07)
    assert breaker.state == OPEN


def test_configure_keeps_the_state() -> None:
    breaker = make(failures=5, reset=30)
    trip(breaker, 3)
    breaker.configure(BreakerConfig(failures=4, reset_seconds=30))
    assert breaker.snapshot().failures == 3
    fail(breaker)
    assert breaker.state == OPEN
    breaker.configure(BreakerConfig(failures=10, reset_seconds=60))
    assert breaker.state == OPEN
    retry_in = breaker.snapshot().retry_in
    assert retry_in is not None and retry_in > 30


def test_reset_and_force_open() -> None:
    breaker = make(failures=1, reset=30)
    breaker.force_open()
    assert breaker.state == OPEN
    breaker.reset()
    assert breaker.state == CLOSED
    succeed(breaker)


def test_record_failure_counts_after_the_block() -> None:
    breaker = make(failures=2)
    succeed(breaker)
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == OPEN


async def test_half_open_state_admits_one_trial() -> None:
    # Another replica (shared storage) may leave it half-open: still one trial at a time.
    breaker = make(failures=1, reset=30)
    breaker._cb.half_open()
    assert breaker.state == HALF_OPEN
    release = asyncio.Event()

    async def trial() -> None:
        with breaker.attempt():
            await release.wait()

    task = asyncio.create_task(trial())
    await asyncio.sleep(0)
    with pytest.raises(BreakerOpen), breaker.attempt():
        pass
    release.set()
    await task
    assert breaker.state == CLOSED
