"""Shared CPU work served per tenant in turn: a flood waits behind its own jobs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.embedding.batching import MicroBatcher
from gateway.util import offload
from gateway.util.fair import OWNER, FairQueue, FairWorker


def test_owners_are_served_in_turn_each_in_its_own_order() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(5):
        queue.put(f"a{i}", "a")
    queue.put("b0", "b")
    queue.put("c0", "c")
    queue.put("b1", "b")
    assert len(queue) == 8
    assert list(queue.drain()) == ["a0", "b0", "c0", "a1", "b1", "a2", "a3", "a4"]
    assert len(queue) == 0


def test_the_owner_is_the_running_context_s() -> None:
    queue: FairQueue[str] = FairQueue()
    token = OWNER.set("acme")
    try:
        queue.put("x")
        queue.put("y")
    finally:
        OWNER.reset(token)
    queue.put("z")  # nobody's: the default owner
    assert list(queue.drain()) == ["x", "z", "y"]


async def _as(owner: str, coro_fn, *args):  # type: ignore[no-untyped-def]
    """Run a coroutine function as `owner`'s work (a task copies the context)."""
    OWNER.set(owner)
    return await coro_fn(*args)


async def test_a_flood_queues_behind_itself_on_the_worker() -> None:
    worker = FairWorker("test-fair")
    gate = threading.Event()
    done: list[str] = []

    def job(name: str) -> str:
        gate.wait(5)
        done.append(name)
        return name

    flood = [asyncio.create_task(_as("flooder", worker.submit, job, f"f{i}")) for i in range(20)]
    await asyncio.sleep(0.05)  # the flood is queued (the first one running, held)
    other = asyncio.create_task(_as("quiet", worker.submit, job, "q"))
    await asyncio.sleep(0.05)
    gate.set()
    assert await other == "q"
    await asyncio.gather(*flood)
    # Behind the one running and the flooder's next in line, not behind twenty.
    assert done.index("q") == 2


async def test_worker_errors_reach_the_caller_and_the_worker_goes_on() -> None:
    worker = FairWorker("test-fair-err")

    def boom() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await worker.submit(boom)
    assert await worker.submit(lambda: 3) == 3


async def test_offload_runs_off_the_loop_and_inline_when_asked() -> None:
    here = threading.get_ident()
    assert await offload.run(True, threading.get_ident) == here
    assert await offload.run(False, threading.get_ident) != here


async def test_a_batch_takes_every_tenant_before_a_second_text_of_one() -> None:
    seen: list[list[str]] = []
    gate = threading.Event()

    def batch(items: list[str]) -> list[str]:
        gate.wait(5)
        seen.append(list(items))
        return items

    batcher: MicroBatcher[str, str] = MicroBatcher(batch, max_batch=4, policy="eager")
    first = asyncio.create_task(batcher.submit("warm"))
    await asyncio.sleep(0.05)  # the worker is busy with "warm"
    flood = asyncio.create_task(_as("flooder", batcher.submit_many, [f"f{i}" for i in range(12)]))
    await asyncio.sleep(0.01)
    quiet = asyncio.create_task(_as("quiet", batcher.submit, "q"))
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(first, flood, quiet)
    await batcher.close()
    assert "q" in seen[1]  # the first batch after the flood queued holds the quiet text


def test_take_first_passes_over_owners_whose_next_item_does_not_fit() -> None:
    queue: FairQueue[int] = FairQueue()
    for owner, items in (("a", [100, 1]), ("b", [2, 3]), ("c", [4])):
        for item in items:
            queue.put(item, owner)
    assert queue.take_first(lambda n: n < 10) == 2  # a's next is too large: b's is taken
    assert queue.take_first(lambda n: n < 3) is None  # only owners' next items are looked at
    assert queue.take_first(lambda n: n < 10) == 4
    assert list(queue.drain()) == [100, 3, 1]  # each owner's order kept; b went to the back


async def test_a_batch_s_padded_cost_stays_within_its_budget() -> None:
    seen: list[list[int]] = []
    gate = threading.Event()

    def batch(items: list[int]) -> list[int]:
        gate.wait(5)
        seen.append(list(items))
        return items

    # Each item costs its value: 4 items of 100 pad to 400; a 30 joins only a batch that
    # still fits with it.
    batcher: MicroBatcher[int, int] = MicroBatcher(batch, max_batch=32, cost=int, max_cost=400)
    first = asyncio.create_task(batcher.submit(1))
    await asyncio.sleep(0.05)  # the worker is busy with it; the rest queue up
    wide = asyncio.create_task(_as("wide", batcher.submit_many, [100] * 6))
    narrow = asyncio.create_task(_as("narrow", batcher.submit_many, [30] * 3))
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(first, wide, narrow)
    await batcher.close()
    for run in seen:
        assert len(run) * max(run) <= 400 or len(run) == 1, run
    assert sorted(x for run in seen for x in run) == sorted([1] + [100] * 6 + [30] * 3)


async def test_a_short_item_never_waits_for_a_long_lane_batch() -> None:
    """Items costing `long_from` or more run on a second thread: a short one is answered
    while a long batch is still running."""
    long_running = threading.Event()
    release = threading.Event()
    threads: dict[int, str] = {}

    def batch(items: list[int]) -> list[int]:
        threads[max(items)] = threading.current_thread().name
        if max(items) >= 50:
            long_running.set()
            release.wait(5)
        return items

    batcher: MicroBatcher[int, int] = MicroBatcher(
        batch, cost=int, max_cost=512, long_from=50, thread_name="test-lanes"
    )
    try:
        long = asyncio.create_task(_as("flooder", batcher.submit_many, [120, 110, 100]))
        while not long_running.is_set():
            await asyncio.sleep(0.005)
        assert await asyncio.wait_for(_as("quiet", batcher.submit, 7), 2) == 7
        assert not long.done()  # the long batch is still held
        release.set()
        assert await long == [120, 110, 100]
    finally:
        release.set()
        await batcher.close()
    assert threads[7] != threads[120] and threads[120].startswith("test-lanes-L")


def test_a_long_lane_needs_a_cost() -> None:
    with pytest.raises(ValueError, match="cost"):
        MicroBatcher(lambda items: items, long_from=10)
