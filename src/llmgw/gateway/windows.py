"""Minute windows for the whole server: requests and tokens per key in each clock minute,
counted by every worker of the server in one place, so that `rpm` and `tpm` hold for the
server as they do for one process.

One process counts in a dict (`LocalWindows`). A server with several workers counts in two
tables its workers map (`SharedWindows`, each a `gateway.inflight.SharedInFlight`), one for even
minutes and one for odd: the first count of a new minute clears the table that held the minute
before last and stamps it with the new one. A worker that dies leaves its counts in place (the
requests it admitted were admitted), unlike the requests it had in flight.

Every access happens under the server's in-flight lock (the limiter's one step), so a check and
the count it leads to are one step across the workers. Syncs with the store take
`sync_lock()`, one worker at a time: see `gateway.limits`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from llmgw.gateway.inflight import SharedInFlight

WINDOW_FILES = ("windows-even", "windows-odd")
SYNC_LOCK = "windows.lock"


class Windows(Protocol):
    """What the limiter counts a server's minute windows with."""

    def get(self, name: str, minute: int) -> tuple[int, int]:
        """Requests and tokens counted for `name` in `minute`."""
        ...

    def add(self, name: str, minute: int, requests: int, tokens: int) -> None:
        """Count more (or fewer) requests and tokens for `name` in `minute`."""
        ...

    def sync_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held across one sync with the store: one process of the server at a time (blocking:
        take it off the event loop)."""
        ...


class LocalWindows:
    """One process's windows; minutes before the last two are dropped as time moves on."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], list[int]] = {}
        self._latest = 0

    def get(self, name: str, minute: int) -> tuple[int, int]:
        counts = self._counts.get((name, minute))
        return (counts[0], counts[1]) if counts is not None else (0, 0)

    def add(self, name: str, minute: int, requests: int, tokens: int) -> None:
        if minute != self._latest:
            if minute < self._latest - 1:
                return  # a minute nobody asks about any more
            if minute > self._latest:
                self._latest = minute
                self._counts = {k: v for k, v in self._counts.items() if k[1] >= minute - 1}
        counts = self._counts.get((name, minute))
        if counts is None:
            self._counts[(name, minute)] = [requests, tokens]
        else:
            counts[0] += requests
            counts[1] += tokens

    def sync_lock(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # one process, one sync task


class SharedWindows:
    """The windows of all of a server's workers, in two tables each of them maps."""

    def __init__(self, run_dir: Path, workers: int, index: int, create: bool = False) -> None:
        self._tables = [SharedInFlight(run_dir / name, workers, index, create)
                        for name in WINDOW_FILES]
        self._sync_fd = os.open(run_dir / SYNC_LOCK, os.O_RDWR | os.O_CREAT, 0o600)

    def close(self) -> None:
        for t in self._tables:
            t.close()
        os.close(self._sync_fd)

    def _table(self, minute: int, claim: bool) -> SharedInFlight | None:
        table = self._tables[minute % 2]
        stamp = table.stamp()
        if stamp == minute:
            return table
        if not claim or stamp > minute:
            return None  # it holds another minute: nothing of this one is counted
        table.restamp(minute)
        return table

    def get(self, name: str, minute: int) -> tuple[int, int]:
        table = self._table(minute, claim=False)
        return table.get(name) if table is not None else (0, 0)

    def add(self, name: str, minute: int, requests: int, tokens: int) -> None:
        table = self._table(minute, claim=True)
        if table is not None:
            table.add(name, requests, tokens)

    @contextlib.contextmanager
    def sync_lock(self) -> Iterator[None]:
        fcntl.flock(self._sync_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._sync_fd, fcntl.LOCK_UN)
