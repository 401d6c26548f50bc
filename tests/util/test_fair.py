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
