"""Loop time charged to the task that took it, and the lateness others feel."""

from __future__ import annotations

import asyncio
import time

from gateway.testing.harness.loop_time import UNCOUNTED, StepTimer, charged_to, ticker


def block(seconds: float) -> None:
    """Hold the loop for `seconds` of this thread's CPU (so at least as long in wall time,
    however busy the machine's other work keeps the core)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_each_step_is_charged_to_the_task_of_its_context() -> None:
    async def work(steps: int, each: float) -> None:
        for _ in range(steps):
            block(each)
            await asyncio.sleep(0)

    loop = asyncio.get_running_loop()
    original = asyncio.events.Handle._run
    with StepTimer().installed() as timer:
        await asyncio.gather(
            loop.create_task(work(3, 0.01), context=charged_to(1)),
            loop.create_task(work(1, 0.03), context=charged_to(2)),
        )
    assert len(timer.steps[1]) >= 3 and sum(timer.steps[1]) >= 0.03
    # Task 2 took one long step and its end, and none of task 1's (counted, not timed: a
    # loaded machine stretches the wall time of a step)
    assert max(timer.steps[2]) >= 0.03 and len(timer.steps[2]) <= 3
    assert timer.cpu[1] >= 0.02  # spinning is CPU on the loop thread
    assert asyncio.events.Handle._run is original  # uninstalled
    before = timer.steps[1][:]
    await work(2, 0.001)
    assert timer.steps[1] == before


async def test_the_ticker_feels_a_blocked_loop() -> None:
    stop, lateness = asyncio.Event(), []
    loop = asyncio.get_running_loop()
    tick = loop.create_task(ticker(stop, lateness), context=charged_to(UNCOUNTED))
    await asyncio.sleep(0.02)
    block(0.05)
    await asyncio.sleep(0.02)
    stop.set()
    await tick
    assert max(lateness) >= 0.04
    assert sorted(lateness)[len(lateness) // 2] < 0.01  # most ticks on time
