"""SQLite helpers the embedded stores share."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


class StoreUnopenable(OSError):
    """A store's file cannot be created or opened (an unwritable directory, a file where its
    directory should be, a corrupt database): the message names the path and why."""


def connect(path: str | None) -> sqlite3.Connection:
    """A store's database in WAL mode (None: in memory), its file readable by this user only
    (it holds prompts and answers); autocommit, so transactions are explicit."""
    try:
        if path is not None:
            Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            Path(path).touch(mode=0o600, exist_ok=True)
            os.chmod(path, 0o600)  # SQLite gives its -wal and -shm files the same mode
        db = sqlite3.connect(path or ":memory:", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
        db.execute("PRAGMA busy_timeout=5000")
    except (OSError, sqlite3.Error) as err:
        reason = f"{err.strerror}: {err.filename!r}" if isinstance(err, OSError) else str(err)
        raise StoreUnopenable(f"cannot open the store {path}: {reason}") from err
    return db


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
