"""The cache of a server with several workers and no Redis: one SQLite file in the server's
private run directory, which every worker of the server opens. An answer one worker kept is a
hit on all of them, and a purge in the main process empties it for all at once.

Each process reads and writes it on one thread of its own (SQLite calls block); an answer's
time to live is checked on reading, and each model keeps at most its bound (the oldest go
first)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from llmgw.core.errors import SharedStoreDown

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY, model TEXT NOT NULL, value BLOB NOT NULL,
    kept REAL NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS answers_by_model ON answers (model, kept);
"""
# How long a worker waits for another's write to the file before it takes it for a miss.
BUSY_TIMEOUT_S = 0.5


class InFile:
    """The store of a server's workers: one SQLite file they all open."""

    kind = "file"

    def __init__(self, path: Path, max_entries: int, now: Callable[[], float] = time.time) -> None:
        self.path = path
        self.max_entries = max_entries
        self._now = now
        # One thread: the connection is used from it alone, and calls queue in order.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="answer-file")
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                 check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=OFF")  # a cache: a lost write is a miss, no more
                db.executescript(_SCHEMA)
            except sqlite3.Error:
                db.close()  # tried again at the next call (another worker held the file)
                raise
            self._db = db
        return self._db

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            try:
                return work(self._conn())
            except sqlite3.Error as exc:
                raise SharedStoreDown(f"the answer file {self.path.name}: {exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def get(self, key: str) -> bytes | None:
        now = self._now()

        def get(db: sqlite3.Connection) -> bytes | None:
            row = db.execute("SELECT value, expires FROM answers WHERE key = ?", (key,)).fetchone()
            return bytes(row[0]) if row is not None and row[1] > now else None

        return await self._run(get)

    async def put(self, key: str, model: str, value: bytes, ttl_s: float) -> None:
        now = self._now()

        def put(db: sqlite3.Connection) -> None:
            with db:  # one transaction: the bound holds whichever worker writes
                db.execute("BEGIN IMMEDIATE")
                db.execute("DELETE FROM answers WHERE model = ? AND expires <= ?", (model, now))
                db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?)",
                           (key, model, value, now, now + ttl_s))
                (count,) = db.execute("SELECT COUNT(*) FROM answers WHERE model = ?",
                                      (model,)).fetchone()
                if count > self.max_entries:
                    db.execute("DELETE FROM answers WHERE key IN (SELECT key FROM answers "
                               "WHERE model = ? ORDER BY kept LIMIT ?)",
                               (model, count - self.max_entries))

        await self._run(put)

    async def purge(self, model: str | None) -> int:
        def purge(db: sqlite3.Connection) -> int:
            if model is None:
                return db.execute("DELETE FROM answers").rowcount
            return db.execute("DELETE FROM answers WHERE model = ?", (model,)).rowcount

        return await self._run(purge)

    async def count(self) -> dict[str, int]:
        now = self._now()

        def count(db: sqlite3.Connection) -> dict[str, int]:
            rows = db.execute("SELECT model, COUNT(*) FROM answers WHERE expires > ? "
                              "GROUP BY model", (now,)).fetchall()
            return {str(m): int(n) for m, n in rows}

        return await self._run(count)

    def close(self) -> None:
        """Close the file and stop the thread (at shutdown)."""
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        self._thread.submit(close).result()
        self._thread.shutdown()
