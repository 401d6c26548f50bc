"""Micro-batching: many concurrent callers, one batched call on one dedicated worker thread.

A batch is filled from the tenants in turn (`util/fair.py`), not in arrival order: one
tenant's burst of texts waits behind its own, and another's text joins the next batch."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from gateway.util.fair import FairQueue
from gateway.util.threads import single_worker

T = TypeVar("T")
R = TypeVar("R")

Policy = Literal["eager", "window", "adaptive"]


class BatcherClosed(RuntimeError):
    """Raised to callers whose work was still queued when the batcher shut down."""


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    largest: int = 0
    sizes: dict[int, int] = field(default_factory=dict)

    def record(self, n: int) -> None:
        self.batches += 1
        self.items += n
        self.largest = max(self.largest, n)
        self.sizes[n] = self.sizes.get(n, 0) + 1


@dataclass(slots=True)
class _Job(Generic[T, R]):
    item: T
    future: asyncio.Future[R]


class MicroBatcher(Generic[T, R]):
    """Queue items from concurrent coroutines; run `fn(batch)` for them on one worker thread.

    `fn` takes a list of items and returns one result per item, in order. It always runs on
    the same single thread, so a model behind it never sees concurrent calls.

    Policies for when a batch starts (the worker runs one batch at a time in every policy):
      - "eager": as soon as the worker is free; whatever queued up meanwhile joins the batch.
      - "window": wait up to `window_ms` after the first item (or until `max_batch` items).
      - "adaptive": eager while traffic is light; when the previous batch held several items
        (callers are piling up), wait up to `window_ms` to fill the next one.
    """

    def __init__(
        self,
        fn: Callable[[list[T]], Sequence[R]],
        *,
        max_batch: int = 32,
        window_ms: float = 2.0,
        policy: Policy = "eager",
        thread_name: str = "microbatch",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if policy not in ("eager", "window", "adaptive"):
            raise ValueError(f"unknown batching policy {policy!r}")
        self._fn = fn
        self.max_batch = max_batch
        self.window_s = max(0.0, window_ms) / 1000.0
        self.policy: Policy = policy
        self.stats = BatchStats()
        self._queue: FairQueue[_Job[T, R]] = FairQueue()
        self._executor = single_worker(thread_name)
        self._wakeup: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._last_batch = 0

    @property
    def closed(self) -> bool:
        return self._closed

    async def run_in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the worker thread (e.g. load a model where it will be used)."""
        if self._closed:
            raise BatcherClosed("batcher is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def submit(self, item: T) -> R:
        """Queue one item and wait for its result."""
        return await self._enqueue(item)

    async def submit_many(self, items: Sequence[T]) -> list[R]:
        """Queue all items at once (they batch with everyone else's) and wait for all results."""
        futures = [self._enqueue(item) for item in items]
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise

    def _enqueue(self, item: T) -> asyncio.Future[R]:
        if self._closed:
            raise BatcherClosed("batcher is closed")
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wakeup, self._full = asyncio.Event(), asyncio.Event()
            self._task = loop.create_task(self._collect(), name="microbatch-collector")
        assert self._wakeup is not None and self._full is not None
        fut: asyncio.Future[R] = loop.create_future()
        self._queue.put(_Job(item, fut))
        self._wakeup.set()
        if len(self._queue) >= self.max_batch:
            self._full.set()
        return fut

    async def _collect(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
            await self._gather_more()
            batch = self._take()
            if not batch:
                continue
            self._last_batch = len(batch)
            self.stats.record(len(batch))
            try:
                results = await loop.run_in_executor(
                    self._executor, self._fn, [job.item for job in batch]
                )
                if len(results) != len(batch):
                    raise RuntimeError(
                        f"batch function returned {len(results)} results for {len(batch)} items"
                    )
            except asyncio.CancelledError:
                _fail(batch, BatcherClosed("batcher closed while the batch was running"))
                raise
            except Exception as exc:  # every caller of this batch gets the error
                _fail(batch, exc)
            else:
                for job, result in zip(batch, results, strict=True):
                    if not job.future.done():  # the caller may have been cancelled meanwhile
                        job.future.set_result(result)

    async def _gather_more(self) -> None:
        """Decide how long to let the batch fill before starting it."""
        wait = self.policy == "window" or (self.policy == "adaptive" and self._last_batch > 1)
        if not wait or self.window_s <= 0:
            # One loop turn lets callers woken in this same tick (e.g. by the previous batch's
            # results) queue up, at no measurable latency cost.
            await asyncio.sleep(0)
            return
        assert self._full is not None
        if len(self._queue) >= self.max_batch:
            return
        self._full.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._full.wait(), self.window_s)

    def _take(self) -> list[_Job[T, R]]:
        batch: list[_Job[T, R]] = []
        while self._queue and len(batch) < self.max_batch:
            job = self._queue.take()
            if not job.future.done():  # skip callers that were cancelled while queued
                batch.append(job)
        return batch

    async def close(self) -> None:
        """Finish the batch in progress, fail queued callers, stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        queued = list(self._queue.drain())
        _fail(queued, BatcherClosed("batcher closed before this item ran"))
        if self._task is not None:
            assert self._wakeup is not None
            self._wakeup.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)


def _fail(jobs: Sequence[_Job[Any, Any]], exc: BaseException) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(exc)
