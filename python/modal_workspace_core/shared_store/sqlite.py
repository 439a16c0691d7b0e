"""`SharedStore` in one SQLite file, for the local driver: every gateway process on one data
root shares it (WAL, so that each sees the others' writes at its next read).

Each call opens its own connection: the async calls in a worker thread (the event loop never
waits on the disk), their blocking twins (`read_now` and the like, for callers already off the
loop) in the caller's thread. Processes never share a connection. The file is made at the first
write, readable by the gateway's user alone; a server nobody writes to (every request with a
wrong key) leaves none.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .interface import check_folder, check_key

__all__ = ["SqliteStore"]

T = TypeVar("T")

_CREATE_TRIES = 100
_SCHEMA = "CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, value BLOB NOT NULL)"


class SqliteStore:
    """`SharedStore` over the SQLite file at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._created = False

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 10000")
        return db

    def _create(self) -> None:
        if self._created:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(mode=0o600, exist_ok=True)
        # Switching to WAL takes the file's exclusive lock, for which SQLite's busy timeout does
        # not wait: processes making the file at once each try until one has switched it.
        for attempt in range(_CREATE_TRIES):
            try:
                with contextlib.closing(self._connect()) as db:
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute(_SCHEMA)
                break
            except sqlite3.OperationalError:
                if attempt == _CREATE_TRIES - 1:
                    raise
                time.sleep(0.05)
        self._created = True

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        self._create()
        with contextlib.closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

    def _read(self, work: Callable[[sqlite3.Connection], T], empty: T) -> T:
        if not self._created and not self.path.exists():
            return empty
        self._create()
        with contextlib.closing(self._connect()) as db:
            return work(db)

    # The `SharedStore` calls, blocking: for callers already off the event loop (a worker
    # thread that holds a lock of its own around a read-modify-write). The async calls below
    # run these in a worker thread; there is one implementation of each.

    def read_now(self, key: str) -> bytes | None:
        """`read`, blocking the calling thread."""
        check_key(key)
        row = self._read(
            lambda db: db.execute("SELECT value FROM records WHERE key = ?", (key,)).fetchone(),
            None,
        )
        return None if row is None else bytes(row[0])

    def write_now(self, key: str, value: bytes) -> None:
        """`write`, blocking the calling thread."""
        check_key(key)
        self._write(
            lambda db: db.execute("INSERT OR REPLACE INTO records VALUES (?, ?)", (key, value))
        )

    def create_now(self, key: str, value: bytes) -> bool:
        """`create`, blocking the calling thread."""
        check_key(key)
        inserted = self._write(
            lambda db: (
                db.execute("INSERT OR IGNORE INTO records VALUES (?, ?)", (key, value)).rowcount
            )
        )
        return inserted == 1

    def remove_now(self, key: str) -> None:
        """`remove`, blocking the calling thread."""
        check_key(key)
        low, high = _below(key)
        self._write(
            lambda db: db.execute(
                "DELETE FROM records WHERE key = ? OR (key >= ? AND key < ?)", (key, low, high)
            )
        )

    def names_now(self, folder: str) -> list[str]:
        """`names`, blocking the calling thread."""
        check_folder(folder)
        low, high = _below(folder)
        rows: list[tuple[str]] = self._read(
            lambda db: db.execute(
                "SELECT key FROM records WHERE key >= ? AND key < ?", (low, high)
            ).fetchall(),
            [],
        )
        return sorted({str(row[0])[len(low) :].split("/", 1)[0] for row in rows})

    async def read(self, key: str) -> bytes | None:
        return await asyncio.to_thread(self.read_now, key)

    async def write(self, key: str, value: bytes) -> None:
        await asyncio.to_thread(self.write_now, key, value)

    async def create(self, key: str, value: bytes) -> bool:
        return await asyncio.to_thread(self.create_now, key, value)

    async def remove(self, key: str) -> None:
        await asyncio.to_thread(self.remove_now, key)

    async def names(self, folder: str) -> list[str]:
        return await asyncio.to_thread(self.names_now, folder)


def _below(folder: str) -> tuple[str, str]:
    """The range of keys inside `folder`: from `folder/` up to `folder0` ('0' follows '/')."""
    return f"{folder}/", f"{folder}0"
