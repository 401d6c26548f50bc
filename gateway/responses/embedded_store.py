"""The embedded response store: SQLite in WAL mode, one file, no server; the default.

A row is (key, blob, created, expires, owner, size): the key is SHA-256 of tenant and id
(backend.py), the blob the stored response as one orjson value, the owner a hash of the
tenant it is charged to and size its blob's bytes. Each owner's (rows, bytes) is kept in
memory (read at start, kept by every insert, delete, sweep and eviction), so a row over its
tenant's quota is refused in the transaction that would have written it.

Everything SQLite does runs on one worker thread, so the event loop never waits on the
disk. A put returns once its transaction committed (the writes that arrive meanwhile share
the next one), and WAL with synchronous=NORMAL keeps it through a crash of the process; the
file is kept across restarts. Expired rows are never returned, and swept every
`sweep_seconds` (and at start); past `max_entries`, the oldest rows go first, and past
`max_bytes` in all new rows are refused (the store's own bounds, whatever the tenants'
quotas add up to).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config.responses import Quota
from gateway.responses.backend import (
    Clock,
    OnFailure,
    QuotaRefused,
    ResponseStore,
    owner_key,
)
from gateway.util.sqlite import connect, transaction
from gateway.util.threads import single_worker

log = logging.getLogger("gateway.responses")

SWEEP_SECONDS = 300.0
_SWEEP_BATCH = 1000  # rows per transaction, so a sweep never holds the write lock for long

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id INTEGER PRIMARY KEY,
    key BLOB NOT NULL UNIQUE,
    value BLOB NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    owner BLOB,
    size INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires_at);
"""
# Files from before owners: the columns are added, sizes filled in, owners left unknown (such
# rows are charged to nobody and go at their expiry).
MIGRATION = (
    "ALTER TABLE responses ADD COLUMN owner BLOB",
    "ALTER TABLE responses ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
    "UPDATE responses SET size = length(value)",
)
Usage = tuple[int, int]  # (rows, bytes)


class EmbeddedResponseStore(ResponseStore):
    outages = (sqlite3.Error, OSError)

    def __init__(
        self,
        path: str | None,
        ttl_seconds: int,
        *,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        max_response_bytes: int | None = None,
        quotas: Callable[[str], Quota] | None = None,
        sweep_seconds: float = SWEEP_SECONDS,
        clock: Clock = time.time,
        on_failure: OnFailure | None = None,
    ) -> None:
        """`path` None: in memory only (lost on restart)."""
        super().__init__(
            ttl_seconds,
            clock=clock,
            on_failure=on_failure,
            max_response_bytes=max_response_bytes,
            quotas=quotas,
        )
        self.path = path
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._usage: dict[bytes, Usage] = {}  # owner -> (rows, bytes); the worker thread's
        self._bytes = 0  # bytes of every row, owned or not
        self.sweep_seconds = sweep_seconds
        self._executor = single_worker("responses-db")
        self._db: sqlite3.Connection | None = None
        self._rows = 0  # live and expired rows in the table (the worker thread's count)
        self._sweeper: asyncio.Task[None] | None = None
        # writes waiting for the next transaction, and the task that commits them
        self._pending: list[tuple[Row, asyncio.Future[None]]] = []
        self._committer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._db is None:
            await self._run(self._open, self._clock())
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._committer is not None:
            await self._committer  # the writes already asked for are kept
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._db is not None:
            await self._run(self._close)
        self._executor.shutdown(wait=True)

    async def sweep(self) -> int:
        """Delete the expired rows now; returns how many."""
        removed: int = await self._run(self._delete_expired, self._clock())
        return removed

    def __len__(self) -> int:
        """Rows in the table, expired ones not yet swept included."""
        return self._rows

    @property
    def size(self) -> int:
        """Bytes of the rows' blobs, expired ones not yet swept included."""
        return self._bytes

    def usage(self, tenant: str) -> Usage:
        return self._usage.get(owner_key(tenant), (0, 0))

    # --- the backend -------------------------------------------------------------------------

    async def _write(
        self, key: bytes, blob: bytes, expires_at: float, owner: bytes, quota: Quota
    ) -> None:
        """Committed with the writes that arrive while the one before is committing, in one
        transaction (group commit): at c=16 one write at a time on the store's thread halved
        the stored requests a second (bench/responses_overhead.py)."""
        committed = asyncio.get_running_loop().create_future()
        committed.add_done_callback(_retrieved)  # its put may have been cancelled meanwhile
        self._pending.append((Row(key, blob, expires_at, owner, quota), committed))
        if self._committer is None:
            self._committer = asyncio.get_running_loop().create_task(self._commit_pending())
        await asyncio.shield(committed)  # a client that leaves does not take the write back

    async def _commit_pending(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                rows = [row for row, _ in batch]
                try:
                    kept: list[bool] = await self._run(self._insert, rows, self._clock())
                    outcomes = list(zip(batch, kept, strict=True))
                except Exception as exc:  # every write of the batch failed alike
                    for _, committed in batch:
                        committed.set_exception(exc)
                    continue
                for (_, committed), ok in outcomes:
                    if ok:
                        committed.set_result(None)
                    else:
                        committed.set_exception(QuotaRefused())
        finally:
            self._committer = None

    async def _touch(self, keys: list[bytes], expires_at: float) -> None:
        await self._run(self._extend, keys, expires_at)

    async def _read(self, key: bytes, now: float) -> bytes | None:
        value: bytes | None = await self._run(self._select, key, now)
        return value

    async def _remove(self, key: bytes, now: float) -> bool:
        removed: bool = await self._run(self._delete, key, now)
        return removed

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_seconds)
            try:
                await self.sweep()
            except self.outages as exc:
                self._warnings.warning("stored responses: sweep failed: %r", exc, key="sweep")

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # --- SQLite side (runs on the store's own thread) ----------------------------------------

    def _open(self, now: float) -> None:
        db = connect(self.path)
        db.executescript(SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
        if "owner" not in columns:
            with transaction(db, immediate=True):
                for statement in MIGRATION:
                    db.execute(statement)
        self._db = db
        self._rows, self._bytes = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses"
        ).fetchone()
        self._usage = {
            owner: (rows, size)
            for owner, rows, size in db.execute(
                "SELECT owner, COUNT(*), SUM(size) FROM responses "
                "WHERE owner IS NOT NULL GROUP BY owner"
            )
        }
        self._delete_expired(now)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise sqlite3.ProgrammingError("the response store is not started (or was closed)")
        return self._db

    def _insert(self, batch: list[Row], now: float) -> list[bool]:
        """Each row written unless over its owner's quota or the store's bytes (False)."""
        db = self._connection()
        rows, total, usage = self._rows, self._bytes, dict(self._usage)
        kept: list[bool] = []
        with transaction(db, immediate=True):
            for row in batch:
                size = len(row.blob)
                old = db.execute(
                    "SELECT owner, size FROM responses WHERE key = ?", (row.key,)
                ).fetchone()
                count, used = usage.get(row.owner, (0, 0))
                others = total
                if old is not None:  # the same tenant and id again: replaced
                    if old[0] == row.owner:
                        count, used = count - 1, used - old[1]
                    others -= old[1]
                if not _fits(row.quota, count + 1, used + size) or (
                    self.max_bytes is not None and others + size > self.max_bytes
                ):
                    kept.append(False)
                    continue
                if old is not None:
                    db.execute("DELETE FROM responses WHERE key = ?", (row.key,))
                    rows, total = rows - 1, total - old[1]
                    _charge(usage, old[0], -1, -old[1])
                db.execute(
                    "INSERT INTO responses (key, value, created_at, expires_at, owner, size) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (row.key, row.blob, now, row.expires_at, row.owner, size),
                )
                rows, total = rows + 1, total + size
                _charge(usage, row.owner, 1, size)
                kept.append(True)
            over = rows - self.max_entries if self.max_entries is not None else 0
            if over > 0:  # the oldest first: ids only grow
                gone = db.execute(
                    "DELETE FROM responses WHERE id IN "
                    "(SELECT id FROM responses ORDER BY id LIMIT ?) RETURNING owner, size",
                    (over,),
                ).fetchall()
                rows -= len(gone)
                total -= _uncharge(usage, gone)
        self._rows, self._bytes, self._usage = rows, total, usage  # committed
        return kept

    def _extend(self, keys: list[bytes], expires_at: float) -> None:
        db = self._connection()
        with transaction(db, immediate=True):
            for start in range(0, len(keys), _SWEEP_BATCH):
                chunk = keys[start : start + _SWEEP_BATCH]
                db.execute(
                    "UPDATE responses SET expires_at = max(expires_at, ?) WHERE key IN "
                    f"({', '.join('?' * len(chunk))})",
                    (expires_at, *chunk),
                )

    def _select(self, key: bytes, now: float) -> bytes | None:
        row = (
            self._connection()
            .execute("SELECT value FROM responses WHERE key = ? AND expires_at > ?", (key, now))
            .fetchone()
        )
        return None if row is None else bytes(row[0])

    def _delete(self, key: bytes, now: float) -> bool:
        rows = (
            self._connection()
            .execute(
                "DELETE FROM responses WHERE key = ? RETURNING expires_at, owner, size", (key,)
            )
            .fetchall()  # every row stepped: the statement is done, its lock released
        )
        if not rows:
            return False
        self._rows -= 1
        usage = dict(self._usage)
        self._bytes -= _uncharge(usage, [rows[0][1:]])
        self._usage = usage
        return bool(rows[0][0] > now)  # an expired row was already gone, as far as clients know

    def _delete_expired(self, now: float) -> int:
        db = self._connection()
        removed = 0
        while True:
            gone = db.execute(
                "DELETE FROM responses WHERE id IN "
                "(SELECT id FROM responses WHERE expires_at <= ? LIMIT ?) RETURNING owner, size",
                (now, _SWEEP_BATCH),
            ).fetchall()
            removed += len(gone)
            self._rows -= len(gone)
            usage = dict(self._usage)
            self._bytes -= _uncharge(usage, gone)
            self._usage = usage
            if len(gone) < _SWEEP_BATCH:
                return removed

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()


@dataclass(frozen=True, slots=True)
class Row:
    key: bytes
    blob: bytes
    expires_at: float
    owner: bytes
    quota: Quota


def _fits(quota: Quota, rows: int, size: int) -> bool:
    return (quota.max_responses is None or rows <= quota.max_responses) and (
        quota.max_bytes is None or size <= quota.max_bytes
    )


def _charge(usage: dict[bytes, Usage], owner: bytes | None, rows: int, size: int) -> None:
    if owner is None:
        return
    count, used = usage.get(owner, (0, 0))
    if count + rows <= 0:
        usage.pop(owner, None)
    else:
        usage[owner] = (count + rows, used + size)


def _uncharge(usage: dict[bytes, Usage], gone: list[Any]) -> int:
    """Take removed rows (owner, size) off their owners; returns their bytes."""
    freed = 0
    for owner, size in gone:
        _charge(usage, owner, -1, -size)
        freed += size
    return freed


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a write's outcome as seen (asyncio warns of an exception nobody retrieved)."""
    if not future.cancelled():
        future.exception()
