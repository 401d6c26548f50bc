"""How long work holds an asyncio event loop, and how late the loop is for everyone else.

Everything the loop runs is a callback (`Handle._run`): each step of a task between two awaits
is one. `StepTimer` wraps `asyncio.events.Handle._run` with a `perf_counter` pair and charges
each callback's duration (and the loop thread's CPU time in it, `time.thread_time`) to the key
of the `contextvars.Context` it runs in: run a task in `charged_to(key)` and its steps, and
the done-callbacks it registers, are charged to `key`. Callbacks of no key are summed apart
("other"); a negative key is not counted at all (the ticker's own steps). Wall time beyond
CPU time is waiting, for the GIL or for a core.

This needs the pure-Python event loop: on uvloop callbacks run in C and cannot be wrapped.
The wrapper adds about 1 us per callback.

`ticker` sleeps a tick in a loop and records how late it wakes: what any other request on
the loop would feel.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

CHARGED_TO: contextvars.ContextVar[int] = contextvars.ContextVar("charged_to", default=0)
UNCOUNTED = -1


def charged_to(key: int) -> contextvars.Context:
    """A context whose callbacks `StepTimer` charges to `key` (pass it to `create_task`)."""
    ctx = contextvars.copy_context()
    ctx.run(CHARGED_TO.set, key)
    return ctx


class StepTimer:
    """Every callback's duration while installed, by the key of its context."""

    def __init__(self) -> None:
        self.steps: dict[int, list[float]] = defaultdict(list)  # key -> each step, s
        self.cpu: dict[int, float] = defaultdict(float)  # key -> loop-thread CPU, s
        self.other = 0.0  # callbacks charged to no key, s
        self.other_max = 0.0

    def reset(self) -> None:
        self.steps.clear()
        self.cpu.clear()
        self.other = self.other_max = 0.0

    @contextmanager
    def installed(self) -> Iterator[StepTimer]:
        original = asyncio.events.Handle._run
        timer, clock, cpu_clock = self, time.perf_counter, time.thread_time

        def _run(handle: asyncio.Handle) -> None:
            t0, c0 = clock(), cpu_clock()
            try:
                original(handle)
            finally:
                dt = clock() - t0
                context = handle._context  # type: ignore[attr-defined]
                key = context.get(CHARGED_TO, 0) if context is not None else 0
                if key > 0:
                    timer.steps[key].append(dt)
                    timer.cpu[key] += cpu_clock() - c0
                elif key == 0:
                    timer.other += dt
                    timer.other_max = max(timer.other_max, dt)

        asyncio.events.Handle._run = _run  # type: ignore[method-assign, assignment]
        try:
            yield self
        finally:
            asyncio.events.Handle._run = original  # type: ignore[method-assign]


async def ticker(stop: asyncio.Event, lateness: list[float], tick: float = 0.001) -> None:
    """Until `stop` is set: sleep `tick`, append how much later than that it woke (s)."""
    clock = time.perf_counter
    while not stop.is_set():
        t0 = clock()
        await asyncio.sleep(tick)
        lateness.append(clock() - t0 - tick)
