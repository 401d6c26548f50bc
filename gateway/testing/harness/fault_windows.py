"""Faults on a timer: windows back to back, each of the kind a schedule names and lasting its
seconds. A window starts once `apply` has put its fault in force and ends when the next one's
is, so a benchmark can put each request in the window it was sent in."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass


@dataclass
class Window:
    target: str  # what the fault is on ("primary", "retriever", ...)
    kind: str
    start: float  # unix time the fault was in force for new requests
    end: float = math.inf


async def run_windows(
    target: str,
    schedule: Iterable[tuple[str, float]],
    apply: Callable[[str], Awaitable[None]],
    windows: list[Window],
    stop: asyncio.Event,
    started: asyncio.Event | None = None,
) -> None:
    """Apply each (kind, seconds) of `schedule` in turn, appending its window to `windows`,
    until the schedule ends or `stop` is set; `started` is set once the first is in force."""
    current: Window | None = None
    for kind, seconds in schedule:
        await apply(kind)
        now = time.time()
        if current is not None:
            current.end = now
        current = Window(target, kind, now)
        windows.append(current)
        if started is not None:
            started.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        if stop.is_set():
            break
    if current is not None:
        current.end = time.time()
