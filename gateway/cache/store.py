"""The cache store interface: what crosses it, so a shared backend can replace the embedded one.

An entry carries its scope and exact key (strings), the vector of its last user turn (float32,
L2-normalized, tagged with the embedder that made it), the stored completion (JSON) and the
gateway headers that describe it (replayed on a hit; none for older entries), tenant and
model (for purges and stats) and its expiry. Stores never interpret scopes: similarity is
searched only among entries of the same scope.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(slots=True)
class CacheEntry:
    scope: str
    exact_key: str
    tenant: str
    model: str
    text: str  # the last user turn it answers (for the near-miss guards)
    response: dict[str, Any]  # the stored chat.completion
    expires_at: float
    headers: dict[str, str] = field(default_factory=dict)  # the answer's (gateway/reply/headers.py)
    vector: np.ndarray | None = None
    embedder: str | None = None
    id: int | None = None
    created_at: float = 0.0


@dataclass(slots=True)
class StoreStats:
    entries: int
    scopes: int
    by_tenant: dict[str, int] = field(default_factory=dict)
    by_model: dict[str, int] = field(default_factory=dict)
    bytes_on_disk: int | None = None
    max_entries: int = 0
    entry_bytes: int | None = None  # what the entries take (SQLite and memory stores)
    max_bytes: int | None = None


class CacheStore(Protocol):
    def __len__(self) -> int:
        """Entries held now (cheap: read by the metrics scrape)."""

    async def open(self) -> None:
        """Load or create the store. Idempotent."""

    async def get(self, exact_key: str, now: float) -> CacheEntry | None:
        """The live entry stored under an exact key."""

    async def search(
        self,
        scope: str,
        vector: np.ndarray,
        embedder: str,
        k: int,
        now: float,
        min_similarity: float = -1.0,
    ) -> list[tuple[CacheEntry, float]]:
        """Up to k live entries of `scope` made by `embedder` with a cosine of at least
        `min_similarity`, best first. Entries below it are neither read nor marked used."""

    def best_similarity(self, scope: str, vector: np.ndarray, embedder: str) -> float | None:
        """The cosine of the nearest entry of `scope` (index only, nothing read): what a miss
        reports, so a threshold can be judged against what came close."""

    def publish(self, entry: CacheEntry) -> None:
        """Make the entry visible to this process's lookups (exact key and vector) at once,
        in memory; sets `entry.id`. An entry under the same exact key is replaced. Lookups
        that find it wait for its `put` (see `Commits`); `len` and `stats` count it once it
        is durable."""

    async def put(self, entry: CacheEntry) -> int:
        """Store durably (an entry under the same exact key is replaced); returns its id.
        Publishes it first if it was not; one withdrawn since it was published (replaced,
        purged, evicted) is not written. When this returns the entry survives a crash of the
        process; a failed write also withdraws the published one."""

    async def evict(self, now: float) -> int:
        """Drop expired entries and the least recently used beyond the size cap."""

    async def purge(self, tenant: str | None = None, model: str | None = None) -> int:
        """Delete every entry matching the filters (none given: everything)."""

    async def stats(self) -> StoreStats: ...

    async def close(self) -> None: ...


@runtime_checkable
class LazyVectors(Protocol):
    """A store that keeps entries without a vector and adds their vectors later: a miss in a
    scope with no entries then need not embed at all (nothing to compare with), and the vector
    is computed only if another lookup in that scope comes (the embedded store; the shared
    Redis store embeds every entry as it is stored)."""

    def scope_size(self, scope: str) -> int:
        """Live entries of `scope`, with a vector or without (cheap, in memory)."""

    async def vectorless(self, scope: str, now: float, limit: int) -> list[CacheEntry]:
        """Up to `limit` live entries of `scope` stored without a vector, newest first."""

    async def add_vector(self, entry: CacheEntry, vector: np.ndarray, embedder: str) -> None:
        """Give an entry its vector: searchable at once, durable when this returns."""

    def forgo_vector(self, entry: CacheEntry) -> None:
        """Never offer this entry for a vector again."""


class Commits:
    """Published entries whose durable write is in flight. A lookup that finds one waits for
    its write (about a millisecond): the repeat is a hit, never a miss, and a hit is never an
    answer that a crash could still take back."""

    def __init__(self) -> None:
        self._futures: dict[int, asyncio.Future[bool]] = {}

    def begin(self, id_: int) -> None:
        self._futures[id_] = asyncio.get_running_loop().create_future()

    def end(self, id_: int, committed: bool) -> None:
        future = self._futures.pop(id_, None)
        if future is not None and not future.done():
            future.set_result(committed)

    async def wait(self, id_: int) -> bool:
        """True once `id_` is durable (or was never pending); False if it was withdrawn."""
        future = self._futures.get(id_)
        return True if future is None else await asyncio.shield(future)
