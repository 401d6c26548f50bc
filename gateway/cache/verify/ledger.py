"""Where verdicts and wrong-entry marks are kept: this process's memory (`MemoryLedger`),
which a shared ledger (redis_ledger.py) extends so that every replica sees every replica's.

Lookups read only memory (a mark check is a dict lookup and a few dot products); writes go
wherever the ledger keeps them, off the request path.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gateway.cache.verify.estimate import Observation

WINDOW = 4000  # verdicts per model the estimate and the threshold are drawn from
MAX_MARKED_ENTRIES = 100_000


@dataclass(frozen=True, slots=True)
class Mark:
    """An entry found wrong for a question: never served again for that question, for one
    within the threshold of it and nearer to it than to the entry, or for one farther from
    the entry than it was."""

    entry: str  # the entry's exact key
    vector: np.ndarray  # the question's (L2-normalized)
    similarity: float  # that question's cosine to the entry
    expires_at: float  # with the entry


class Ledger(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def models(self) -> list[str]: ...

    def observations(self, model: str) -> Sequence[Observation]:
        """The model's latest verdicts (at most WINDOW), oldest first."""

    def version(self, model: str) -> int:
        """Grows with every verdict the model gains (here or, shared, on another replica)."""

    async def record(self, model: str, observation: Observation) -> None: ...

    def marks(self, entry: str) -> Sequence[Mark]: ...

    async def mark(self, mark: Mark) -> None: ...


class MemoryLedger:
    """Verdicts and marks of this process, in memory."""

    def __init__(self) -> None:
        self._windows: dict[str, deque[Observation]] = {}
        self._versions: dict[str, int] = {}
        self._marks: OrderedDict[str, list[Mark]] = OrderedDict()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def models(self) -> list[str]:
        return sorted(self._windows)

    def observations(self, model: str) -> Sequence[Observation]:
        return self._windows.get(model, ())

    def version(self, model: str) -> int:
        return self._versions.get(model, 0)

    async def record(self, model: str, observation: Observation) -> None:
        self.remember(model, observation)

    def marks(self, entry: str) -> Sequence[Mark]:
        found = self._marks.get(entry)
        if not found:
            return ()
        now = time.time()
        live = [m for m in found if m.expires_at > now]
        if len(live) != len(found):
            if live:
                self._marks[entry] = live
            else:
                del self._marks[entry]
        return live

    async def mark(self, mark: Mark) -> None:
        self.remember_mark(mark)

    def remember(self, model: str, observation: Observation) -> None:
        """Keep a verdict in memory (recorded here, or read from the shared ledger)."""
        window = self._windows.get(model)
        if window is None:
            window = self._windows[model] = deque(maxlen=WINDOW)
        window.append(observation)
        self._versions[model] = self._versions.get(model, 0) + 1

    def remember_mark(self, mark: Mark) -> None:
        found = self._marks.setdefault(mark.entry, [])
        found.append(mark)
        self._marks.move_to_end(mark.entry)
        while len(self._marks) > MAX_MARKED_ENTRIES:
            self._marks.popitem(last=False)
