"""The embedded response store: SQLite in WAL mode, one file, no server; the default.

A row is (key, blob, created, expires): the key is SHA-256 of tenant and id (backend.py), the
blob the whole stored response as one orjson value. Everything SQLite does runs on one worker
thread, so the event loop never waits on the disk. A put returns once its transaction
committed (the writes that arrive meanwhile share the next one), and WAL with
synchronous=NORMAL keeps it through a crash of the process; the file is kept across
restarts. Expired rows are never returned, and swept every `sweep_seconds` (and at start);
past `max_entries`, the oldest rows go first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from typing import Any

from gateway.responses.backend import Clock, OnFailure, ResponseStore
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
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires_at);
"""


class EmbeddedResponseStore(ResponseStore):
    outages = (sqlite3.Error, OSError)

    def __init__(
        self,
        path: str | None,
        ttl_seconds: int,
        *,
        max_entries: int | None = None,
        sweep_seconds: float = SWEEP_SECONDS,
        clock: Clock = time.time,
        on_failure: OnFailure | None = None,
    ) -> None:
        """`path` None: in memory only (lost on restart)."""
        super().__init__(ttl_seconds, clock=clock, on_failure=on_failure)
        self.path = path
        self.max_entries = max_entries
        self.sweep_seconds = sweep_seconds
        self._executor = single_worker("responses-db")
        self._db: sqlite3.Connection | None = None
        self._rows = 0  # live and expired rows in the table (the worker thread's count)
        self._sweeper: asyncio.Task[None] | None = None
        # writes waiting for the next transaction, and the task that commits them
        self._pending: list[tuple[bytes, bytes, float, asyncio.Future[None]]] = []
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

    # --- the backend -------------------------------------------------------------------------

    async def _write(self, key: bytes, blob: bytes, expires_at: float) -> None:
        """Committed with the writes that arrive while the one before is committing, in one
        transaction (group commit): at c=16 one write at a time on the store's thread halved
        the stored requests a second (bench/responses_overhead.py)."""
        committed = asyncio.get_running_loop().create_future()
        committed.add_done_callback(_retrieved)  # its put may have been cancelled meanwhile
        self._pending.append((key, blob, expires_at, committed))
        if self._committer is None:
            self._committer = asyncio.get_running_loop().create_task(self._commit_pending())
        await asyncio.shield(committed)  # a client that leaves does not take the write back

    async def _commit_pending(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                rows = [(key, blob, expires_at) for key, blob, expires_at, _ in batch]
                try:
                    await self._run(self._insert, rows, self._clock())
                except Exception as exc:  # every write of the batch failed alike
                    for *_, committed in batch:
                        committed.set_exception(exc)
                    continue
                for *_, committed in batch:
                    committed.set_result(None)
        finally:
            self._committer = None

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
        self._db = db
        self._rows = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        self._delete_expired(now)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise sqlite3.ProgrammingError("the response store is not started (or was closed)")
        return self._db

    def _insert(self, batch: list[tuple[bytes, bytes, float]], now: float) -> None:
        db = self._connection()
        rows = self._rows
        with transaction(db, immediate=True):
            for key, blob, expires_at in batch:
                replaced = db.execute(
                    "UPDATE responses SET value = ?, expires_at = ? WHERE key = ?",
                    (blob, expires_at, key),
                ).rowcount
                if not replaced:
                    db.execute(
                        "INSERT INTO responses (key, value, created_at, expires_at) "
                        "VALUES (?, ?, ?, ?)",
                        (key, blob, now, expires_at),
                    )
                    rows += 1
            over = rows - self.max_entries if self.max_entries is not None else 0
            if over > 0:  # the oldest first: ids only grow
                rows -= db.execute(
                    "DELETE FROM responses WHERE id IN "
                    "(SELECT id FROM responses ORDER BY id LIMIT ?)",
                    (over,),
                ).rowcount
        self._rows = rows  # committed

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
            .execute("DELETE FROM responses WHERE key = ? RETURNING expires_at", (key,))
            .fetchall()  # every row stepped: the statement is done, its lock released
        )
        if not rows:
            return False
        self._rows -= 1
        return bool(rows[0][0] > now)  # an expired row was already gone, as far as clients know

    def _delete_expired(self, now: float) -> int:
        db = self._connection()
        removed = 0
        while True:
            batch = db.execute(
                "DELETE FROM responses WHERE id IN "
                "(SELECT id FROM responses WHERE expires_at <= ? LIMIT ?)",
                (now, _SWEEP_BATCH),
            ).rowcount
            removed += batch
            self._rows -= batch
            if batch < _SWEEP_BATCH:
                return removed

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a write's outcome as seen (asyncio warns of an exception nobody retrieved)."""
    if not future.cancelled():
        future.exception()
