"""SQLite helpers the embedded stores share."""

from __future__ import annotations

import sqlite3


class transaction:
    """`BEGIN` (or `BEGIN IMMEDIATE`: take the write lock now, for a writer that must not wait
    for it midway), then `COMMIT`, or `ROLLBACK` when the block raises."""

    def __init__(self, db: sqlite3.Connection, *, immediate: bool = False) -> None:
        self.db = db
        self.begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    def __enter__(self) -> None:
        self.db.execute(self.begin)

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
