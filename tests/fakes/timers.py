"""A loop's clock and timers moved by hand, for deadline logic (the rest is the running loop's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ManualTimers:
    """Stands in for the event loop where code reads its time and sets timers (pass it cast
    to `asyncio.AbstractEventLoop`); futures are the running loop's."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[asyncio.TimerHandle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., object], *args: object
                ) -> asyncio.TimerHandle:
        handle = asyncio.TimerHandle(when, callback, args, asyncio.get_running_loop())
        self.timers.append(handle)
        return handle

    def create_future(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    def advance(self, to: float) -> None:
        """Move the clock to `to`, firing every timer due by then at its time, in order."""
        while due := [t for t in self.timers if not t.cancelled() and t.when() <= to]:
            first = min(due, key=lambda t: t.when())
            self.timers.remove(first)
            self.now = max(self.now, first.when())
            first._run()
        self.now = to

    @property
    def pending(self) -> int:
        return sum(not t.cancelled() for t in self.timers)
