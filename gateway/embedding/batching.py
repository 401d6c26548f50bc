"""Micro-batching: many concurrent callers, one batched call on a dedicated worker thread.

A batch is filled from the tenants in turn (`util/fair.py`), not in arrival order: one
tenant's burst of texts waits behind its own, and another's text joins the next batch.

With a `cost` per item (its tokens), a batch is bounded by what it costs to run, `max_cost`:
a model pads every item to the longest, so a batch costs its size times its widest item.
With `long_from` too, items that costly go to a lane of their own, a second worker thread: a
short question never waits for a batch of long prompts to finish. Measured with one tenant
flooding long near-duplicates, another tenant's short questions went from 13-14x their idle
p50 to 1.4-2.5x (docs/RELIABILITY.md, "Fair shares"). Only for a model that may run on two
threads at once (an ONNX Runtime session may).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Literal, TypeVar

from gateway.util.fair import FairQueue
from gateway.util.threads import single_worker

T = TypeVar("T")
R = TypeVar("R")

Policy = Literal["eager", "window", "adaptive"]

# A model's batch, padded, at most (its size times its widest item's tokens): four texts of
# MiniLM's whole window (128 tokens), or 32 short questions.
BATCH_TOKENS = 512
# Items this costly or more run in the long lane, where a lane is asked for: a question is
# shorter, a pasted document or a long conversation's turn longer.
LONG_TOKENS = 64


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
    cost: int = 0


class MicroBatcher(Generic[T, R]):
    """Queue items from concurrent coroutines; run `fn(batch)` for them on a worker thread.

    `fn` takes a list of items and returns one result per item, in order. It always runs on
    the same single thread, so a model behind it never sees concurrent calls; with
    `long_from`, items costing that much or more run on a second thread of their own.

    `cost(item)`, when given: the item's padded width (tokens); a batch, padded, costs at most
    `max_cost` (a wider item alone still runs).

    Policies for when a batch starts (a worker runs one batch at a time in every policy):
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
        cost: Callable[[T], int] | None = None,
        max_cost: int = BATCH_TOKENS,
        long_from: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if policy not in ("eager", "window", "adaptive"):
            raise ValueError(f"unknown batching policy {policy!r}")
        if long_from is not None and cost is None:
            raise ValueError("a long lane needs a cost per item")
        self.max_batch = max_batch
        self.window_s = max(0.0, window_ms) / 1000.0
        self.policy: Policy = policy
        self.max_cost = max_cost
        self.stats = BatchStats()
        self._cost = cost
        self._long_from = long_from
        self._lanes = [_Lane(self, fn, single_worker(thread_name))]
        if long_from is not None:  # the OS keeps 15 characters of a thread's name
            long_name = f"{thread_name[:13]}-L"
            self._lanes.append(_Lane(self, fn, single_worker(long_name)))
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def run_in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the (first) worker thread, e.g. load a model where it is used."""
        if self._closed:
            raise BatcherClosed("batcher is closed")
        executor = self._lanes[0].executor
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

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
        cost = self._cost(item) if self._cost is not None else 0
        long = self._long_from is not None and cost >= self._long_from
        return self._lanes[-1 if long else 0].enqueue(item, cost)

    def fits(self, size: int, widest: int, job: _Job[T, R]) -> bool:
        """Whether `job` joins a batch of `size` items whose widest costs `widest`: the batch,
        padded, still within max_cost."""
        return self._cost is None or (size + 1) * max(widest, job.cost) <= self.max_cost

    async def close(self) -> None:
        """Finish the batches in progress, fail queued callers, stop the worker threads."""
        if self._closed:
            return
        self._closed = True
        for lane in self._lanes:
            await lane.close()


class _Lane(Generic[T, R]):
    """A queue and the worker thread that runs its batches, one at a time."""

    def __init__(
        self,
        owner: MicroBatcher[T, R],
        fn: Callable[[list[T]], Sequence[R]],
        executor: Any,
    ) -> None:
        self.owner = owner
        self.fn = fn
        self.executor = executor
        self.queue: FairQueue[_Job[T, R]] = FairQueue()
        self._wakeup: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_batch = 0

    def enqueue(self, item: T, cost: int) -> asyncio.Future[R]:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wakeup, self._full = asyncio.Event(), asyncio.Event()
            self._task = loop.create_task(self._collect(), name="microbatch-collector")
        assert self._wakeup is not None and self._full is not None
        fut: asyncio.Future[R] = loop.create_future()
        self.queue.put(_Job(item, fut, cost))
        self._wakeup.set()
        if len(self.queue) >= self.owner.max_batch:
            self._full.set()
        return fut

    async def _collect(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                if self.owner.closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
            await self._gather_more()
            batch = self._take()
            if not batch:
                continue
            self._last_batch = len(batch)
            self.owner.stats.record(len(batch))
            try:
                results = await loop.run_in_executor(
                    self.executor, self.fn, [job.item for job in batch]
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
        policy = self.owner.policy
        wait = policy == "window" or (policy == "adaptive" and self._last_batch > 1)
        if not wait or self.owner.window_s <= 0:
            # One loop turn lets callers woken in this same tick (e.g. by the previous batch's
            # results) queue up, at no measurable latency cost.
            await asyncio.sleep(0)
            return
        assert self._full is not None
        if len(self.queue) >= self.owner.max_batch:
            return
        self._full.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._full.wait(), self.owner.window_s)

    def _take(self) -> list[_Job[T, R]]:
        batch: list[_Job[T, R]] = []
        widest = 0
        while self.queue and len(batch) < self.owner.max_batch:
            if not batch:
                job = self.queue.take()
            else:
                found = self.queue.take_first(partial(self.owner.fits, len(batch), widest))
                if found is None:
                    break
                job = found
            if job.future.done():  # skip callers that were cancelled while queued
                continue
            batch.append(job)
            widest = max(widest, job.cost)
        return batch

    async def close(self) -> None:
        _fail(list(self.queue.drain()), BatcherClosed("batcher closed before this item ran"))
        if self._task is not None:
            assert self._wakeup is not None
            self._wakeup.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.get_running_loop().run_in_executor(None, self.executor.shutdown, True)


def _fail(jobs: Sequence[_Job[Any, Any]], exc: BaseException) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(exc)
