"""Requests in flight per key, and the tokens they reserved: counted per server.

One process counts in a dict (`LocalInFlight`). A server with several worker processes counts in
one table all of them map (`SharedInFlight`): a file in the server's private run directory, a
column per worker, read and written under an exclusive `flock`, so a check and the count it
leads to are one step across the workers and a key's `concurrent` limit holds for the server as
a whole, as it does in one process. Each worker writes only its own column; the sum of the
columns is the server's count. When a worker dies its column is cleared before it starts again,
so the requests it had in flight stop holding their slots and reservations.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import mmap
import os
import struct
from collections import defaultdict
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

SLOTS = 16384  # keys with requests in flight at once (slots of keys now idle are reused)
_HEADER = 64
_STAMP = struct.Struct("<q")  # at the header's start: what the table's counts are of (a minute)
_ID = 8  # bytes of a key id's digest; all zero marks a free slot


class InFlight(Protocol):
    """What the limiter counts requests in flight with."""

    def held(self) -> contextlib.AbstractContextManager[None]:
        """Make the gets and adds inside one step (other workers wait)."""
        ...

    def get(self, key_id: str) -> tuple[int, int]:
        """Requests in flight and tokens they reserved, for the key."""
        ...

    def add(self, key_id: str, requests: int, tokens: int) -> None:
        """Count `requests` more in flight (negative: ended), reserving `tokens`."""
        ...


_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()


class _Lock:
    """The table's exclusive `flock`, re-entrant within this process (a class, not a generator:
    it is taken twice per request)."""

    __slots__ = ("_fd", "_depth")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._depth = 0

    def __enter__(self) -> None:
        if not self._depth:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._depth += 1

    def __exit__(self, *_exc: object) -> None:
        self._depth -= 1
        if not self._depth:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


class LocalInFlight:
    """One process's count."""

    def __init__(self) -> None:
        self._requests: dict[str, int] = defaultdict(int)
        self._tokens: dict[str, int] = defaultdict(int)

    def held(self) -> contextlib.AbstractContextManager[None]:
        return _NOTHING  # one process: every step is one step already

    def get(self, key_id: str) -> tuple[int, int]:
        return self._requests.get(key_id, 0), self._tokens.get(key_id, 0)

    def add(self, key_id: str, requests: int, tokens: int) -> None:
        self._requests[key_id] += requests
        self._tokens[key_id] += tokens


class SharedInFlight:
    """The count of all of a server's workers, in a file each of them maps."""

    def __init__(self, path: Path, workers: int, index: int, create: bool = False) -> None:
        self.path = path
        self._workers = workers
        self._index = index
        self._slot = _ID + 16 * workers
        self._row = struct.Struct(f"<{2 * workers}q")
        self._pair = struct.Struct("<qq")
        size = _HEADER + SLOTS * self._slot
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(path, flags, 0o600)
        if create:
            os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)
        self._digests: dict[str, bytes] = {}
        # Where each key's slot was last found (checked against its digest before use: a
        # compaction by any worker moves slots).
        self._slots: dict[str, int] = {}
        self._lock = _Lock(self._fd)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    def held(self) -> contextlib.AbstractContextManager[None]:
        return self._lock

    def _digest(self, key_id: str) -> bytes:
        d = self._digests.get(key_id)
        if d is None:
            d = hashlib.blake2b(key_id.encode(), digest_size=_ID).digest()
            if d == bytes(_ID):
                d = b"\x01" + d[1:]
            self._digests[key_id] = d
        return d

    def _find(self, key_id: str, claim: bool) -> int | None:
        """The offset of the key's slot; with `claim`, a free one is taken for it."""
        digest, m = self._digest(key_id), self._map
        at = self._slots.get(key_id)
        if at is not None and m[at : at + _ID] == digest:
            return at
        at = self._probe(digest, claim)
        if at is not None:
            self._slots[key_id] = at
        elif claim and self._compact():
            return self._find(key_id, claim)
        return at

    def _probe(self, digest: bytes, claim: bool) -> int | None:
        m = self._map
        start = int.from_bytes(digest[:4], "little") % SLOTS
        for step in range(SLOTS):
            at = _HEADER + ((start + step) % SLOTS) * self._slot
            found = m[at : at + _ID]
            if found == digest:
                return at
            if found == bytes(_ID):
                if not claim:
                    return None
                m[at : at + _ID] = digest
                return at
        return None

    def _compact(self) -> bool:
        """Free the slots of keys with nothing in flight; True when some were freed."""
        m, live = self._map, []
        for i in range(SLOTS):
            at = _HEADER + i * self._slot
            values = self._row.unpack_from(m, at + _ID)
            if any(values):
                live.append((m[at : at + _ID], values))
        if len(live) == SLOTS:
            logger.error("the in-flight table is full (%d keys with requests in flight)", SLOTS)
            return False
        m[_HEADER:] = bytes(len(m) - _HEADER)
        for digest, values in live:
            start = int.from_bytes(digest[:4], "little") % SLOTS
            for step in range(SLOTS):
                at = _HEADER + ((start + step) % SLOTS) * self._slot
                if m[at : at + _ID] == bytes(_ID):
                    m[at : at + _ID] = digest
                    self._row.pack_into(m, at + _ID, *values)
                    break
        return True

    def get(self, key_id: str) -> tuple[int, int]:
        at = self._find(key_id, claim=False)
        if at is None:
            return 0, 0
        values = self._row.unpack_from(self._map, at + _ID)
        return sum(values[0::2]), sum(values[1::2])

    def add(self, key_id: str, requests: int, tokens: int) -> None:
        with self.held():
            at = self._find(key_id, claim=True)
            if at is None:
                return  # the table is full (logged): this request is not counted
            at += _ID + 16 * self._index
            r, t = self._pair.unpack_from(self._map, at)
            self._pair.pack_into(self._map, at, r + requests, t + tokens)

    def stamp(self) -> int:
        """What the counts are of, as the last `restamp` said (0 for a new table)."""
        return int(_STAMP.unpack_from(self._map, 0)[0])

    def restamp(self, value: int) -> None:
        """Clear every count of every worker and say the table now counts `value`."""
        with self.held():
            self._map[_HEADER:] = bytes(len(self._map) - _HEADER)
            _STAMP.pack_into(self._map, 0, value)

    def forget(self, index: int) -> None:
        """Clear worker `index`'s column: it died, and its requests with it."""
        with self.held():
            zero = bytes(16)
            for i in range(SLOTS):
                at = _HEADER + i * self._slot + _ID + 16 * index
                self._map[at : at + 16] = zero


def entry(kind: str, *parts: object) -> str:
    """The table's name for something other than a key (`kind` and its parts): it starts with a
    NUL, which no key id holds (key ids are printable), so it never meets a key's count."""
    return "\x00" + "\x00".join((kind, *map(str, parts)))


class JudgeSlots:
    """The judge slots a server's processes hold, the judgments each judge has waiting in them
    and how long each lately sees a judgment take, in its in-flight table (a judge's queue in
    each process leases them here: `guard.judge_queue.SlotLease`)."""

    def __init__(self, flight: InFlight) -> None:
        self._flight = flight
        self._timed_ms: dict[str, int] = {}  # by judge, what this process last showed

    @staticmethod
    def _name(replica: str, index: int) -> str:
        return entry("judge", replica, index)

    def taken(self, replica: str, index: int) -> bool:
        return self._flight.get(self._name(replica, index))[0] > 0

    def take(self, replica: str, index: int) -> bool:
        name = self._name(replica, index)
        with self._flight.held():
            if self._flight.get(name)[0] > 0:
                return False
            self._flight.add(name, 1, 0)
            return True

    def give(self, replica: str, index: int) -> None:
        self._flight.add(self._name(replica, index), -1, 0)

    def queued(self, judge: str) -> int:
        return self._flight.get(entry("judge-queue", judge))[0]

    def count_queued(self, judge: str, more: int) -> None:
        self._flight.add(entry("judge-queue", judge), more, 0)

    def timed(self, judge: str) -> float:
        # The processes that have shown a time, and the sum of their times in ms; less this one's.
        shown, total_ms = self._flight.get(entry("judge-time", judge))
        own = self._timed_ms.get(judge, 0)
        shown -= own > 0
        return (total_ms - own) / shown / 1000 if shown > 0 else 0.0

    def show_timed(self, judge: str, seconds: float) -> None:
        ms, own = round(seconds * 1000), self._timed_ms.get(judge, 0)
        if ms != own:
            self._flight.add(entry("judge-time", judge), (ms > 0) - (own > 0), ms - own)
            self._timed_ms[judge] = ms
