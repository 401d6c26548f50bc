"""Verdicts and wrong-entry marks kept in the embedded store's SQLite file (`type: sqlite`), so
a restarted gateway keeps its estimate and its effective threshold's evidence, and never serves
again an entry it found wrong for a question (the marks live as long as their entries).

Two tables of their own beside the store's `entries`: `verify_verdicts` (each model's latest
WINDOW verdicts; older ones deleted as new ones come) and `verify_marks` (deleted once expired).
Everything is loaded into memory at `open`; lookups read memory only (MemoryLedger). Writes run
on the ledger's own thread, so the event loop never waits on disk; a write that fails costs the
durability of that verdict, never the request (logged, throttled).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from typing import Any

import numpy as np

from gateway.cache.verify.estimate import Observation
from gateway.cache.verify.ledger import MAX_MARKED_ENTRIES, WINDOW, Mark, MemoryLedger
from gateway.observability.logthrottle import ThrottledWarnings
from gateway.util.sqlite import connect, transaction
from gateway.util.threads import single_worker

log = logging.getLogger("gateway.cache.verify")

SCHEMA = """
CREATE TABLE IF NOT EXISTS verify_verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model TEXT NOT NULL,
    similarity REAL NOT NULL,
    agree INTEGER NOT NULL,
    weight REAL NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS verify_verdicts_model ON verify_verdicts (model, id);
CREATE TABLE IF NOT EXISTS verify_marks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    entry TEXT NOT NULL,
    vector BLOB NOT NULL,
    similarity REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS verify_marks_expires ON verify_marks (expires_at);
"""


class SqliteLedger(MemoryLedger):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._executor = single_worker("verify-ledger")
        self._db: sqlite3.Connection | None = None
        self._warnings = ThrottledWarnings(log)

    async def open(self) -> None:
        if self._db is not None:
            return
        verdicts, marks = await self._run(self._open_db, time.time())
        for model, similarity, agree, weight, kind, at in verdicts:
            if kind in ("served", "explored"):
                self.remember(model, Observation(similarity, bool(agree), weight, kind, at))
        for entry, vector, similarity, expires_at in marks:
            if vector and len(vector) % 4 == 0:
                found = np.frombuffer(vector, dtype=np.float32)
                self.remember_mark(Mark(entry, found, similarity, expires_at))

    async def close(self) -> None:
        if self._db is not None:
            await self._run(self._close_db)
        self._executor.shutdown(wait=True)

    async def record(self, model: str, observation: Observation) -> None:
        self.remember(model, observation)
        await self._write("verdict", self._insert_verdict, model, observation)

    async def mark(self, mark: Mark) -> None:
        self.remember_mark(mark)
        await self._write("mark", self._insert_mark, mark, time.time())

    async def _write(self, what: str, fn: Any, *args: Any) -> None:
        if self._db is None:
            return  # not opened (or closed): memory only
        try:
            await self._run(fn, *args)
        except (sqlite3.Error, OSError) as err:
            self._warnings.warning(
                "cache verification: writing a %s to %s failed, kept in memory only: %s",
                what,
                self.path,
                err,
                key=what,
            )

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # --- SQLite side (runs on the ledger's own thread) ---------------------------------------

    def _open_db(self, now: float) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        db = connect(self.path)
        db.executescript(SCHEMA)
        with transaction(db, immediate=True):
            db.execute("DELETE FROM verify_marks WHERE expires_at <= ?", (now,))
            models = [row[0] for row in db.execute("SELECT DISTINCT model FROM verify_verdicts")]
            for model in models:
                _trim(db, model)
            # Memory keeps the newest MAX_MARKED_ENTRIES entries' marks: so does the file.
            db.execute(
                "DELETE FROM verify_marks WHERE entry NOT IN (SELECT entry FROM verify_marks "
                "GROUP BY entry ORDER BY MAX(id) DESC LIMIT ?)",
                (MAX_MARKED_ENTRIES,),
            )
        self._db = db
        verdicts = db.execute(
            "SELECT model, similarity, agree, weight, kind, at FROM verify_verdicts ORDER BY id"
        ).fetchall()
        marks = db.execute(
            "SELECT entry, vector, similarity, expires_at FROM verify_marks ORDER BY id"
        ).fetchall()
        return verdicts, marks

    def _insert_verdict(self, model: str, o: Observation) -> None:
        assert self._db is not None
        with transaction(self._db, immediate=True):
            self._db.execute(
                "INSERT INTO verify_verdicts (model, similarity, agree, weight, kind, at) "
                "VALUES (?,?,?,?,?,?)",
                (model, o.similarity, int(o.agree), o.weight, o.kind, o.at),
            )
            _trim(self._db, model)

    def _insert_mark(self, mark: Mark, now: float) -> None:
        assert self._db is not None
        vector = np.asarray(mark.vector, dtype=np.float32).tobytes()
        with transaction(self._db, immediate=True):
            self._db.execute("DELETE FROM verify_marks WHERE expires_at <= ?", (now,))
            if mark.expires_at > now:
                self._db.execute(
                    "INSERT INTO verify_marks (entry, vector, similarity, expires_at) "
                    "VALUES (?,?,?,?)",
                    (mark.entry, vector, mark.similarity, mark.expires_at),
                )

    def _close_db(self) -> None:
        assert self._db is not None
        self._db.close()
        self._db = None


def _trim(db: sqlite3.Connection, model: str) -> None:
    """Keep the model's newest WINDOW verdicts (an index range: cheap per insert)."""
    db.execute(
        "DELETE FROM verify_verdicts WHERE model = ? AND id <= (SELECT id FROM verify_verdicts "
        "WHERE model = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
        (model, model, WINDOW),
    )
