"""CPU over a phase: by group of processes, what no group accounts for, and the wait for a
machine whose other work has gone quiet."""

from __future__ import annotations

import itertools
import os
import time

from gateway.testing.harness.cpu import MACHINE, cpu_of, foreign_seconds, wait_quiet


def test_groups_are_summed_and_the_machine_is_read_too() -> None:
    before = cpu_of({"me": [os.getpid()], "twice": [os.getpid(), os.getpid()]})
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn a little CPU
        pass
    after = cpu_of({"me": [os.getpid()], "twice": [os.getpid(), os.getpid()]})
    assert after["me"] - before["me"] >= 0.1
    assert abs(after["twice"] - 2 * after["me"]) < 0.05  # three readings, ticks of 10 ms
    assert after[MACHINE] - before[MACHINE] >= after["me"] - before["me"] - 0.05


def test_foreign_seconds_is_what_no_group_used() -> None:
    before = {"gateway": 1.0, "redis": 0.5, MACHINE: 10.0}
    after = {"gateway": 2.0, "redis": 0.7, MACHINE: 12.0}
    assert foreign_seconds(before, after) == 2.0 - 1.2


async def test_it_returns_at_once_on_a_quiet_machine_and_gives_up_on_a_busy_one() -> None:
    ticks = itertools.count()

    def quiet() -> dict[str, float]:  # our group used every busy second
        t = float(next(ticks))
        return {"ours": t, MACHINE: t}

    started = time.monotonic()
    assert await wait_quiet(quiet, max_wait=30) == 0.0
    assert time.monotonic() - started < 2

    def busy() -> dict[str, float]:  # 4 core-seconds of others' work per reading
        t = float(next(ticks))
        return {"ours": 0.0, MACHINE: 4 * t}

    started = time.monotonic()
    assert await wait_quiet(busy, max_wait=1) > 1
    assert 1 <= time.monotonic() - started < 4
