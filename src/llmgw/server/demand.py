"""This server's demand, written to the store where the leader's keeper reads it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from llmgw.core.clock import Clock
from llmgw.core.demand import Activity
from llmgw.core.loops import every
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

# Written at least this often while the server lives, changed or not: the leader then always
# has a recent view, and a write lost to a database hiccup is repaired soon.
REWRITE_S = 10.0


class ActivityReporter:
    """Writes `snapshot()` about once a second when it changed; a queue that forms for a cold
    model is written at once and bumps the store's revision, which wakes the leader."""

    def __init__(self, store: Store, server_id: str, clock: Clock,
                 on_cold_written: Callable[[], None] = lambda: None) -> None:
        self._store = store
        # The revision bump wakes other servers' refreshers; this server (which may be the
        # leader) is told directly, rather than at its refresher's next look.
        self._on_cold_written = on_cold_written
        self._server_id = server_id
        self._clock = clock
        self._wake = asyncio.Event()
        self._urgent = False
        self._written: Activity | None = None
        self._written_at = float("-inf")

    def cold(self, _model: str) -> None:
        """A request started waiting for a model with no ready replica: tell the leader now."""
        self._urgent = True
        self._wake.set()

    async def report(self, snapshot: Callable[[datetime], Activity]) -> None:
        """Write the current activity, `snapshot(now)`, if it changed (or is due, or urgent)."""
        urgent, self._urgent = self._urgent, False
        activity = snapshot(self._clock.now())
        same = (self._written is not None
                and activity.model_copy(update={"at": None}) == self._written.model_copy(update={"at": None}))
        if same and not urgent and self._clock.monotonic() - self._written_at < REWRITE_S:
            return
        try:
            await asyncio.to_thread(self._store.servers.set_activity, self._server_id, activity, urgent)
        except BaseException:
            self._urgent = self._urgent or urgent  # not told yet: the next try tells it
            raise
        self._written, self._written_at = activity, self._clock.monotonic()
        if urgent:
            self._on_cold_written()

    async def run(self, interval_s: float, snapshot: Callable[[datetime], Activity]) -> None:
        """Report every `interval_s`, or at once for a cold queue; a failed write is retried."""
        await every(interval_s, self._wake, lambda: self.report(snapshot),
                    "writing this server's demand", logger)
