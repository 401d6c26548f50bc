"""Where verdicts and wrong-entry marks are kept: this process's memory (`MemoryLedger`),
which a shared ledger (redis_ledger.py) extends so that every replica sees every replica's.

Lookups read only memory (a mark check is a dict lookup and a few dot products); writes go
wherever the ledger keeps them, off the request path.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gateway.cache.verify.estimate import Observation

WINDOW = 4000  # verdicts per (tenant, model) the estimate and the threshold are drawn from
MAX_WINDOWS = 256  # (tenant, model) windows held; the least recently written goes first
MAX_MARKED_ENTRIES = 100_000
_TENANT = "#t:"  # between a window's model and its tenant's hash


def window_key(tenant: str, model: str) -> str:
    """The name of a (tenant, model) verdict window in every ledger: the model and a hash of
    the tenant (a store holds no tenant names). Each tenant's verdicts move only its own."""
    return f"{model}{_TENANT}{tenant_hash(tenant)}"


def tenant_hash(tenant: str) -> str:
    return hashlib.blake2b(tenant.encode(), digest_size=8).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(model, tenant hash) of a window key; None for a window of another shape (one written
    per model, before verification was per tenant: not read)."""
    model, mark, owner = key.rpartition(_TENANT)
    if not mark or not model or len(owner) != 16:
        return None
    return model, owner


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

    def models(self) -> list[str]:
        """The windows held (`window_key`: a tenant's verdicts on a model)."""

    def observations(self, model: str) -> Sequence[Observation]:
        """The window's latest verdicts (at most WINDOW), oldest first."""

    def version(self, model: str) -> int:
        """Grows with every verdict the window gains (here or, shared, on another replica)."""

    async def record(self, model: str, observation: Observation) -> None: ...

    def marks(self, entry: str) -> Sequence[Mark]: ...

    async def mark(self, mark: Mark) -> None: ...


class MemoryLedger:
    """Verdicts and marks of this process, in memory: at most MAX_WINDOWS windows (a window
    dropped is a tenant back on its model's configured threshold until it has evidence
    again), WINDOW verdicts each, and the marks of MAX_MARKED_ENTRIES entries."""

    def __init__(self) -> None:
        self._windows: OrderedDict[str, deque[Observation]] = OrderedDict()
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
            while len(self._windows) > MAX_WINDOWS:
                dropped, _ = self._windows.popitem(last=False)
                self._versions.pop(dropped, None)
        else:
            self._windows.move_to_end(model)
        window.append(observation)
        self._versions[model] = self._versions.get(model, 0) + 1

    def remember_mark(self, mark: Mark) -> None:
        found = self._marks.setdefault(mark.entry, [])
        found.append(mark)
        self._marks.move_to_end(mark.entry)
        while len(self._marks) > MAX_MARKED_ENTRIES:
            self._marks.popitem(last=False)
