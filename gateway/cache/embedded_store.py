"""The embedded cache store: SQLite (WAL) on disk, indexes in memory, no server.

SQLite holds everything durably: a `put` returns after its transaction committed, and WAL with
synchronous=NORMAL keeps committed transactions through a `kill -9` of the process. The memory
side holds only what lookups need fast: exact key -> id, per-scope vector indexes, expiry and
LRU order. Stored answers are read back from SQLite on a hit. All SQLite work runs on one
dedicated thread, so the event loop never waits on disk.

Read-your-writes: `publish` makes an entry visible to this process's lookups at once (ids are
assigned here, not by SQLite); its answer is held in memory until `put` has committed it.
A crash before the commit loses that entry, nothing else: a write is one SQLite statement,
and an older write never replaces a newer one under the same exact key (the ids decide).
"""

from __future__ import annotations

import asyncio
import heapq
import sqlite3
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gateway.cache.index import IndexesByEmbedder
from gateway.cache.store import CacheEntry, Commits, StoreStats
from gateway.util.sqlite import connect, transaction
from gateway.util.threads import single_worker

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    exact_key TEXT NOT NULL UNIQUE,
    scope TEXT NOT NULL,
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    response BLOB NOT NULL,
    headers BLOB,
    embedder TEXT,
    vector BLOB,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    last_used REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_expires ON entries (expires_at);
"""
_ROW = (
    "id, exact_key, scope, tenant, model, text, response, embedder, created_at, expires_at, headers"
)


# What an entry takes on disk, as `_write` counts it: question, answer, headers, vector.
_ENTRY_BYTES = (
    "length(CAST(text AS BLOB)) + length(response) + coalesce(length(headers), 0) "
    "+ coalesce(length(vector), 0)"
)

_PENDING_TRIES = 3  # a lookup follows an answer replaced while it waited, this many times

_HOT_ENTRIES = 256  # entries held in memory besides the pending ones


@dataclass(slots=True)
class _Meta:
    scope: str
    exact_key: str
    tenant: str
    model: str
    embedder: str | None
    expires_at: float
    size: int = 0  # bytes on disk (question, answer, headers, vector); 0 until written


class EmbeddedStore:
    """Entries in SQLite (a file, or memory only), their keys and vectors in memory. Bounded by
    `max_entries` and `max_bytes`: past either, expired entries go, then the least recently used
    of the tenant holding the most (bytes, or entries): one tenant's flood evicts its own
    entries, never a lighter tenant's."""

    def __init__(
        self,
        path: str | None,
        max_entries: int,
        approximate_above: int,
        max_bytes: int | None = None,
    ) -> None:
        self.path = path  # None: in memory only
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.approximate_above = approximate_above
        self._executor = single_worker("cache-store")
        self._db: sqlite3.Connection | None = None
        self._meta: dict[int, _Meta] = {}
        self._by_exact: dict[str, int] = {}
        self._lru: dict[str, OrderedDict[int, None]] = {}  # per tenant, least recent first
        self._bytes = 0
        self._bytes_by_tenant: Counter[str] = Counter()
        self._touched: dict[int, float] = {}
        self._expiries: list[tuple[float, int]] = []  # a heap; stale pairs are skipped
        self._indexes = IndexesByEmbedder(approximate_above)
        self._pending: dict[int, CacheEntry] = {}  # published, not yet committed
        # The last entries read or written: a popular answer is served without a thread hop
        # and an SQLite read per hit (both cost more than the rest of the hit, embedding aside).
        self._hot: OrderedDict[int, CacheEntry] = OrderedDict()
        # Per scope: its live entries, and those stored without a vector (the lookup that
        # missed had nothing to compare with, so it did not embed: `vectorless`, `add_vector`).
        self._scopes: dict[str, set[int]] = {}
        self._vectorless: dict[str, set[int]] = {}
        self._commits = Commits()
        self._next_id = 1
        self._opened = False

    def __len__(self) -> int:
        return len(self._meta) - len(self._pending)

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            return
        rows = await self._run(self._open_db, time.time())
        for row_id, exact_key, scope, tenant, model, embedder, vector, expires_at, size in rows:
            self._next_id = max(self._next_id, row_id + 1)
            meta = _Meta(scope, exact_key, tenant, model, embedder, expires_at)
            self._remember(row_id, meta)
            self._count_bytes(meta, size)
            if vector is not None and embedder is not None:
                self._indexes.add(embedder, scope, row_id, np.frombuffer(vector, np.float32))
        self._opened = True

    async def close(self) -> None:
        if self._db is not None:
            touched, self._touched = self._touched, {}
            await self._run(self._close_db, touched)
        self._executor.shutdown(wait=True)

    # --- the interface -----------------------------------------------------------------------

    async def get(self, exact_key: str, now: float) -> CacheEntry | None:
        for _ in range(_PENDING_TRIES):
            row_id = self._by_exact.get(exact_key)
            if row_id is None or not self._live(row_id, now):
                return None
            pending = self._pending.get(row_id)
            if pending is None:
                break
            if await self._commits.wait(row_id) and row_id in self._meta:
                return self._used(pending, now)
            # withdrawn while we waited (replaced by a newer answer, or its write failed)
        else:
            return None
        entries = await self._durable([row_id])
        return self._used(entries[0], now) if entries else None

    async def search(
        self,
        scope: str,
        vector: np.ndarray,
        embedder: str,
        k: int,
        now: float,
        min_similarity: float = -1.0,
    ) -> list[tuple[CacheEntry, float]]:
        nearest = self._indexes.search(embedder, scope, vector, k)
        found = [(i, s) for i, s in nearest if s >= min_similarity and self._live(i, now)]
        if not found:
            return []
        entries = {i: self._pending[i] for i, _ in found if i in self._pending}
        for i in list(entries):
            if not await self._commits.wait(i) or i not in self._meta:
                del entries[i]  # withdrawn while we waited for its write
        stored = [i for i, _ in found if i not in self._pending and i not in entries]
        if stored:
            entries |= {e.id: e for e in await self._durable(stored) if e.id is not None}
        return [(self._used(entries[i], now), s) for i, s in found if i in entries]

    # Lazy vectors (store.LazyVectors): a miss in a scope with no entries need not embed
    # (nothing to compare with); its entry is stored without a vector, which a later lookup in
    # the scope adds.

    def scope_size(self, scope: str) -> int:
        """Live entries of `scope`, with a vector or without."""
        return len(self._scopes.get(scope, ()))

    async def vectorless(self, scope: str, now: float, limit: int) -> list[CacheEntry]:
        """Up to `limit` live entries of `scope` stored without a vector, newest first."""
        waiting = self._vectorless.get(scope)
        if not waiting:
            return []  # most lookups: every entry of the scope has its vector
        ids = sorted(i for i in waiting if self._live(i, now))[-limit:]
        pending = [self._pending[i] for i in ids if i in self._pending]
        stored = await self._durable([i for i in ids if i not in self._pending])
        return sorted(pending + stored, key=lambda e: -(e.id or 0))

    async def add_vector(self, entry: CacheEntry, vector: np.ndarray, embedder: str) -> None:
        """Give a stored entry the vector it was stored without: searchable when this is
        called, durable when it returns. An entry forgotten meanwhile is left alone."""
        row_id = entry.id
        meta = self._meta.get(row_id) if row_id is not None else None
        if row_id is None or meta is None or meta.embedder is not None:
            return
        meta.embedder, entry.vector, entry.embedder = embedder, vector, embedder
        self._indexes.add(embedder, meta.scope, row_id, vector)
        _discard(self._vectorless, meta.scope, row_id)
        blob = np.asarray(vector, dtype=np.float32).tobytes()
        await self._run(self._write_vector, row_id, blob, embedder)

    def forgo_vector(self, entry: CacheEntry) -> None:
        """Never offer this entry for a vector again (a text the semantic tier does not judge)."""
        if entry.id is not None:
            _discard(self._vectorless, entry.scope, entry.id)

    def best_similarity(self, scope: str, vector: np.ndarray, embedder: str) -> float | None:
        nearest = self._indexes.search(embedder, scope, vector, 1)
        return nearest[0][1] if nearest else None

    def publish(self, entry: CacheEntry) -> None:
        """Visible to this store's lookups when this returns; `put` makes it durable."""
        entry.id, self._next_id = self._next_id, self._next_id + 1
        entry.created_at = entry.created_at or time.time()
        old = self._by_exact.get(entry.exact_key)
        if old is not None:
            self._forget(old)
        meta = _Meta(
            entry.scope,
            entry.exact_key,
            entry.tenant,
            entry.model,
            entry.embedder,
            entry.expires_at,
        )
        self._remember(entry.id, meta)
        self._pending[entry.id] = entry
        self._commits.begin(entry.id)
        if entry.vector is not None and entry.embedder is not None:
            self._indexes.add(entry.embedder, entry.scope, entry.id, entry.vector)

    async def put(self, entry: CacheEntry) -> int:
        if entry.id is None:
            self.publish(entry)
        elif self._pending.get(entry.id) is not entry:
            return entry.id  # withdrawn since it was published (replaced, purged): not written
        row_id = entry.id
        assert row_id is not None
        vector = None if entry.vector is None else entry.vector.astype(np.float32).tobytes()
        try:
            size = await self._run(self._write, entry, vector)
        except BaseException:
            self._forget(row_id)  # memory must not claim what the disk lacks
            raise
        finally:
            self._pending.pop(row_id, None)
            self._commits.end(row_id, row_id in self._meta)
        if row_id in self._meta:
            self._keep_hot([entry])
            self._count_bytes(self._meta[row_id], size)
        if row_id not in self._meta:  # evicted, purged or replaced while it was being written
            await self._run(self._delete_and_touch, [row_id], {})
        if self._over():
            await self.evict(time.time())
        return row_id

    async def evict(self, now: float) -> int:
        doomed = []
        while self._expiries and self._expiries[0][0] <= now:
            expires_at, row_id = heapq.heappop(self._expiries)
            meta = self._meta.get(row_id)
            if meta is not None and meta.expires_at == expires_at:
                doomed.append(row_id)
        for row_id in doomed:
            self._forget(row_id)
        while self._over() and self._lru:
            # The tenant holding the most of what is over gives up its least recently used.
            if len(self._meta) > self.max_entries:
                heaviest = max(self._lru, key=lambda tenant: len(self._lru[tenant]))
            else:
                heaviest = max(self._lru, key=self._bytes_by_tenant.__getitem__)
            row_id = next(iter(self._lru[heaviest]))
            self._forget(row_id)
            doomed.append(row_id)
        touched, self._touched = self._touched, {}
        await self._run(self._delete_and_touch, doomed, touched)
        return len(doomed)

    async def purge(self, tenant: str | None = None, model: str | None = None) -> int:
        doomed = [
            i
            for i, m in self._meta.items()
            if (tenant is None or m.tenant == tenant) and (model is None or m.model == model)
        ]
        for row_id in doomed:
            self._forget(row_id)
        await self._run(self._delete_and_touch, doomed, {})
        return len(doomed)

    async def stats(self) -> StoreStats:
        size = _disk_size(self.path) if self.path is not None else None
        metas = [m for i, m in self._meta.items() if i not in self._pending]  # durable ones
        return StoreStats(
            entries=len(metas),
            scopes=len({m.scope for m in metas}),
            by_tenant=dict(Counter(m.tenant for m in metas)),
            by_model=dict(Counter(m.model for m in metas)),
            bytes_on_disk=size,
            max_entries=self.max_entries,
            entry_bytes=self._bytes,
            max_bytes=self.max_bytes,
        )

    async def wait_for_index_builds(self) -> None:
        await self._indexes.wait_for_builds()

    # --- memory side -------------------------------------------------------------------------

    def _remember(self, row_id: int, meta: _Meta) -> None:
        self._meta[row_id] = meta
        heapq.heappush(self._expiries, (meta.expires_at, row_id))
        if len(self._expiries) > 2 * len(self._meta) + 1024:
            # Pairs of replaced and evicted entries stay until their time comes: in a full
            # store that is a TTL's worth of writes. Rebuild from the live entries instead.
            self._expiries = [(m.expires_at, i) for i, m in self._meta.items()]
            heapq.heapify(self._expiries)
        self._by_exact[meta.exact_key] = row_id
        self._lru.setdefault(meta.tenant, OrderedDict())[row_id] = None
        self._scopes.setdefault(meta.scope, set()).add(row_id)
        if meta.embedder is None:
            self._vectorless.setdefault(meta.scope, set()).add(row_id)

    def _forget(self, row_id: int) -> None:
        meta = self._meta.pop(row_id, None)
        if meta is None:
            return
        if self._by_exact.get(meta.exact_key) == row_id:
            del self._by_exact[meta.exact_key]
        recent = self._lru.get(meta.tenant)
        if recent is not None:
            recent.pop(row_id, None)
            if not recent:
                del self._lru[meta.tenant]
        self._count_bytes(meta, -meta.size)
        self._touched.pop(row_id, None)
        self._hot.pop(row_id, None)
        if self._pending.pop(row_id, None) is not None:
            self._commits.end(row_id, False)
        self._indexes.remove(meta.embedder, row_id)
        _discard(self._scopes, meta.scope, row_id)
        _discard(self._vectorless, meta.scope, row_id)

    def _count_bytes(self, meta: _Meta, size: int) -> None:
        """Add `size` bytes to what `meta`'s entry and its tenant hold (negative: release)."""
        meta.size += size
        self._bytes += size
        self._bytes_by_tenant[meta.tenant] += size
        if self._bytes_by_tenant[meta.tenant] <= 0:
            del self._bytes_by_tenant[meta.tenant]

    def _over(self) -> bool:
        over_bytes = self.max_bytes is not None and self._bytes > self.max_bytes
        return len(self._meta) > self.max_entries or over_bytes

    def _live(self, row_id: int, now: float) -> bool:
        meta = self._meta.get(row_id)
        return meta is not None and meta.expires_at > now

    def _used(self, entry: CacheEntry, now: float) -> CacheEntry:
        assert entry.id is not None
        meta = self._meta.get(entry.id)
        if meta is not None:
            self._lru[meta.tenant].move_to_end(entry.id)
        self._touched[entry.id] = now
        return entry

    async def _durable(self, ids: list[int]) -> list[CacheEntry]:
        """Committed entries by id: from memory when hot, else read on the store's thread."""
        hot = [self._hot[i] for i in ids if i in self._hot]
        cold = [i for i in ids if i not in self._hot]
        read: list[CacheEntry] = await self._run(self._read, cold) if cold else []
        live = [e for e in read if e.id in self._meta]  # not forgotten while it was read
        self._keep_hot(hot + live)
        return hot + live

    def _keep_hot(self, entries: list[CacheEntry]) -> None:
        for entry in entries:
            assert entry.id is not None
            self._hot[entry.id] = entry
            self._hot.move_to_end(entry.id)
        while len(self._hot) > _HOT_ENTRIES:
            self._hot.popitem(last=False)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # --- SQLite side (runs on the store's own thread) ----------------------------------------

    def _open_db(self, now: float) -> list[tuple[Any, ...]]:
        db = connect(self.path)
        db.executescript(SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
        if "headers" not in columns:  # a store written before answers kept their headers
            db.execute("ALTER TABLE entries ADD COLUMN headers BLOB")
        db.execute("DELETE FROM entries WHERE expires_at <= ?", (now,))
        self._db = db
        return db.execute(
            "SELECT id, exact_key, scope, tenant, model, embedder, vector, expires_at, "
            f"{_ENTRY_BYTES} FROM entries ORDER BY last_used"
        ).fetchall()

    def _write_vector(self, row_id: int, vector: bytes, embedder: str) -> None:
        assert self._db is not None
        self._db.execute(
            "UPDATE entries SET vector = ?, embedder = ? WHERE id = ?", (vector, embedder, row_id)
        )

    def _write(self, entry: CacheEntry, vector: bytes | None) -> int:
        """Write `entry`; the bytes it takes (question, answer, headers, vector)."""
        assert self._db is not None
        now = time.time()
        text = entry.text.encode("utf-8", "surrogatepass")
        response = orjson.dumps(entry.response)
        headers = orjson.dumps(entry.headers) if entry.headers else None
        # `WHERE excluded.id > id`: a write that lost a race to a newer one changes nothing.
        self._db.execute(
            "INSERT INTO entries (id, exact_key, scope, tenant, model, text, response, headers, "
            "embedder, vector, created_at, expires_at, last_used) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (exact_key) DO UPDATE SET id=excluded.id, scope=excluded.scope, "
            "tenant=excluded.tenant, model=excluded.model, text=excluded.text, "
            "response=excluded.response, headers=excluded.headers, embedder=excluded.embedder, "
            "vector=excluded.vector, "
            "created_at=excluded.created_at, expires_at=excluded.expires_at, "
            "last_used=excluded.last_used "
            "WHERE excluded.id > entries.id",
            (
                entry.id,
                entry.exact_key,
                entry.scope,
                entry.tenant,
                entry.model,
                entry.text,
                response,
                headers,
                entry.embedder,
                vector,
                now,
                entry.expires_at,
                now,
            ),
        )
        return len(text) + len(response) + len(headers or b"") + len(vector or b"")

    def _read(self, ids: list[int]) -> list[CacheEntry]:
        assert self._db is not None
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"SELECT {_ROW} FROM entries WHERE id IN ({marks})", ids)
        return [
            CacheEntry(
                id=r[0],
                exact_key=r[1],
                scope=r[2],
                tenant=r[3],
                model=r[4],
                text=r[5],
                response=orjson.loads(r[6]),
                embedder=r[7],
                created_at=r[8],
                expires_at=r[9],
                headers=orjson.loads(r[10]) if r[10] else {},
            )
            for r in rows
        ]

    def _delete_and_touch(self, doomed: list[int], touched: dict[int, float]) -> None:
        assert self._db is not None
        with transaction(self._db):
            for start in range(0, len(doomed), 500):
                batch = doomed[start : start + 500]
                self._db.execute(
                    f"DELETE FROM entries WHERE id IN ({','.join('?' * len(batch))})", batch
                )
            self._db.executemany(
                "UPDATE entries SET last_used = ? WHERE id = ?",
                [(when, row_id) for row_id, when in touched.items()],
            )

    def _close_db(self, touched: dict[int, float]) -> None:
        self._delete_and_touch([], touched)
        assert self._db is not None
        self._db.close()
        self._db = None


def _discard(by_scope: dict[str, set[int]], scope: str, row_id: int) -> None:
    """Take `row_id` out of its scope's set, and the set out once it is empty."""
    ids = by_scope.get(scope)
    if ids is not None:
        ids.discard(row_id)
        if not ids:
            del by_scope[scope]


def file_stats(path: str, max_entries: int, max_bytes: int | None = None) -> StoreStats:
    """Statistics read straight from a store file, without loading it (the CLI's view, safe
    while a gateway has it open: WAL lets readers in)."""
    if not Path(path).exists():
        return StoreStats(
            entries=0,
            scopes=0,
            bytes_on_disk=0,
            max_entries=max_entries,
            entry_bytes=0,
            max_bytes=max_bytes,
        )
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        now = time.time()
        live = "FROM entries WHERE expires_at > ?"
        count = f"SELECT COUNT(*), COUNT(DISTINCT scope), SUM({_ENTRY_BYTES}) {live}"
        entries, scopes, entry_bytes = db.execute(count, (now,)).fetchone()
        by_tenant = dict(db.execute(f"SELECT tenant, COUNT(*) {live} GROUP BY tenant", (now,)))
        by_model = dict(db.execute(f"SELECT model, COUNT(*) {live} GROUP BY model", (now,)))
    finally:
        db.close()
    return StoreStats(
        entries=entries,
        scopes=scopes,
        by_tenant=by_tenant,
        by_model=by_model,
        bytes_on_disk=_disk_size(path),
        max_entries=max_entries,
        entry_bytes=entry_bytes or 0,
        max_bytes=max_bytes,
    )


def _disk_size(path: str) -> int:
    files = [Path(path + suffix) for suffix in ("", "-wal", "-shm")]
    return sum(f.stat().st_size for f in files if f.exists())
