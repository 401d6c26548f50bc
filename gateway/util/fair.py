"""Shared CPU work served fairly between tenants: each owner's jobs wait behind its own.

The embedder, the judge and the offload thread are one worker each, shared by every tenant.
In arrival order, one tenant's flood of large bodies or near-duplicates puts everyone else's
small requests at the back of its queue. Here each owner (the tenant the request belongs to,
`OWNER`) has a queue of its own and the worker takes from the owners in turn: another tenant's
job waits behind the one running and at most one job of each busy owner, whatever they queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from gateway.util.threads import name_this_thread

T = TypeVar("T")

# Whose request the running code serves: set once the tenant is known (http middleware); work
# queued from anywhere under it (tasks created there copy it) is that tenant's.
OWNER: ContextVar[str] = ContextVar("work_owner", default="")


class FairQueue(Generic[T]):
    """FIFO per owner; `take` serves the owners in turn, one item each."""

    def __init__(self) -> None:
        self._queues: OrderedDict[str, deque[T]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def put(self, item: T, owner: str | None = None) -> None:
        key = OWNER.get() if owner is None else owner
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(item)
        self._size += 1

    def take(self) -> T:
        """The next owner's oldest item; that owner goes to the back of the line."""
        return self._pop(next(iter(self._queues)))

    def take_first(self, fits: Callable[[T], bool]) -> T | None:
        """The oldest item of the first owner in turn whose oldest item `fits` (each owner's
        items still leave in order); None when no owner's does."""
        for owner, queue in self._queues.items():
            if fits(queue[0]):
                return self._pop(owner)
        return None

    def _pop(self, owner: str) -> T:
        queue = self._queues.pop(owner)
        item = queue.popleft()
        self._size -= 1
        if queue:  # to the back of the line
            self._queues[owner] = queue
        return item

    def drain(self) -> Iterator[T]:
        """Every item left, emptying the queue."""
        while self._size:
            yield self.take()


class FairWorker:
    """One named thread running submitted calls, the owners served in turn."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: FairQueue[tuple[Callable[..., Any], tuple[Any, ...], _Reply]] = FairQueue()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)` as the current owner's; the future resolves on the caller's loop."""
        reply: _Reply = _Reply(asyncio.get_running_loop())
        with self._ready:
            self._jobs.put((fn, args, reply))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._ready.notify()
        return reply.future

    def _work(self) -> None:
        name_this_thread(self._name)
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                fn, args, reply = self._jobs.take()
            if reply.future.cancelled():
                continue
            try:
                reply.deliver(fn(*args), None)
            except BaseException as exc:  # the caller gets it, the worker goes on
                reply.deliver(None, exc)


class _Reply:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()

    def deliver(self, result: Any, exc: BaseException | None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if exc is not None:
                self.future.set_exception(exc)
            else:
                self.future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            self.loop.call_soon_threadsafe(settle)
