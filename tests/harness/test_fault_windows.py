"""Faults on a timer: windows follow the schedule back to back, and stop ends the last one."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from gateway.testing.harness.fault_windows import Window, run_windows


async def test_windows_follow_the_schedule_back_to_back_until_stopped() -> None:
    applied: list[str] = []
    windows: list[Window] = []
    stop, started = asyncio.Event(), asyncio.Event()

    async def apply(kind: str) -> None:
        applied.append(kind)

    schedule = itertools.cycle([("healthy", 0.1), ("failing", 0.2)])
    task = asyncio.create_task(run_windows("primary", schedule, apply, windows, stop, started))
    await started.wait()
    await asyncio.sleep(0.45)
    stop.set()
    await task
    assert applied[:3] == ["healthy", "failing", "healthy"] and len(applied) == len(windows)
    assert [w.kind for w in windows] == applied and {w.target for w in windows} == {"primary"}
    for before, after in itertools.pairwise(windows):
        assert before.end == after.start
    assert windows[1].end - windows[1].start == pytest.approx(0.2, abs=0.08)
    assert windows[-1].end < float("inf")


async def test_a_finite_schedule_ends_by_itself() -> None:
    windows: list[Window] = []

    async def apply(kind: str) -> None:
        pass

    await run_windows("kb", [("error", 0.05), ("slow", 0.05)], apply, windows, asyncio.Event())
    assert [w.kind for w in windows] == ["error", "slow"] and windows[-1].end < float("inf")
