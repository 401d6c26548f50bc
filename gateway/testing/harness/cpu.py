"""CPU time over a phase of a benchmark: of each named group of processes, and of the whole
machine, so that the cores used by processes outside the benchmark (others sharing the
machine) show next to the figures, and a measurement can wait for them to go quiet first.

Unlike latency, CPU time per request hardly moves when other work shares the cores, so it
shows each component's own cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

from gateway.testing.harness.procstat import cpu_seconds, machine_busy

MACHINE = "machine"

Groups = Mapping[str, Iterable[int]]


def cpu_of(groups: Groups) -> dict[str, float]:
    """CPU seconds so far of each group's processes, and `machine`: every core's busy time."""
    out = {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in groups.items()}
    out[MACHINE] = machine_busy()
    return out


def foreign_seconds(before: Mapping[str, float], after: Mapping[str, float]) -> float:
    """Busy CPU seconds between two readings that none of the groups account for."""
    own = sum(after[k] - before[k] for k in after if k != MACHINE)
    return after[MACHINE] - before[MACHINE] - own


async def wait_quiet(
    read: Callable[[], Mapping[str, float]], max_wait: float, limit: float = 0.3
) -> float:
    """Wait (up to `max_wait` s) until processes outside the groups `read` reads use under
    `limit` cores; the cores they used in the last half second."""
    deadline = time.monotonic() + max_wait
    waited = False
    while True:
        before, t0 = read(), time.monotonic()
        await asyncio.sleep(0.5)
        after, t1 = read(), time.monotonic()
        foreign = foreign_seconds(before, after) / (t1 - t0)
        if foreign < limit or time.monotonic() >= deadline:
            if waited:
                state = "quiet" if foreign < limit else f"still busy ({foreign:.2f} cores)"
                print(f"    machine {state}, measuring", flush=True)
            return foreign
        if not waited:
            print(f"    other work uses {foreign:.2f} cores: waiting for quiet", flush=True)
            waited = True
