"""One change notifier: every wake-up of every loop goes through it.

A change made on this server (an admin write, an agent's report, a keeper's action) and a change
another server made (seen as a newer store revision by the refresher) are both announced here;
each loop that reacts to changes (the refresher, the node agent, the leader's keepers and serve
jobs) registers the event it waits on. `settle` also brings this server's request path up to date
before returning, so an admin call's answer and the next request agree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from llmgw.core.loops import woken


class Notifier:
    """Wakes every registered loop on a change."""

    def __init__(self) -> None:
        self._events: list[asyncio.Event] = []
        self._sync: list[Callable[[], Awaitable[object]]] = []

    def watch(self, event: asyncio.Event | None = None) -> asyncio.Event:
        """Register (or make) an event that is set on every change."""
        event = event or asyncio.Event()
        self._events.append(event)
        return event

    def unwatch(self, event: asyncio.Event) -> None:
        """Stop waking `event` (a leader's loop that stopped with its leadership)."""
        if event in self._events:
            self._events.remove(event)

    def sync_with(self, refresh: Callable[[], Awaitable[object]]) -> None:
        """Have `settle` await `refresh` (this server's view of the store) after a change."""
        self._sync.append(refresh)

    async def next_change(self, timeout_s: float) -> bool:
        """Wait for the next change, at most `timeout_s`; False when none came."""
        event = self.watch()
        try:
            return await woken(event, timeout_s)
        finally:
            self.unwatch(event)

    def changed(self) -> None:
        """Something changed: every watcher looks again."""
        for event in self._events:
            event.set()

    async def settle(self) -> None:
        """Announce a change and wait until this server's own view has it."""
        self.changed()
        for refresh in self._sync:
            await refresh()
