"""CPU-bound work on large requests, off the event loop, on one dedicated thread.

Parsing a multi-MB body, building its cache key or running the near-miss guards on a long
pair takes milliseconds each; on the loop, twenty such requests queue up behind each other
and stall everything else (/healthz, every other tenant). On one worker thread they run one
at a time while the loop keeps serving: one thread, so at most one competes with the loop for
the GIL (a C call that holds it, like a JSON parse, delays the loop by that call only, never by
a queue of them). Small inputs stay inline, where a thread hop costs more than the work.
The thread serves tenants in turn (`util/fair.py`): one tenant's flood of large bodies queues
behind its own work, not in front of everyone else's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gateway.util.fair import FairWorker

T = TypeVar("T")

_worker = FairWorker("gateway-cpu")


async def run(inline: bool, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)`: here when `inline`, else on the worker thread."""
    if inline:
        return fn(*args)
    return await _worker.submit(fn, *args)
