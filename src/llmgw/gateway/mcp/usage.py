"""Tool usage: calls, errors, withheld results and cost per key, server, tool and day, counted
in memory as calls end and written in batches (additive upserts into `mcp_usage`, so every
worker and server adds its own), as the model path's usage meter does (principle 2: the hot
path never waits on the database)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import date, datetime
from enum import StrEnum

from llmgw.core.errors import LlmgwError
from llmgw.core.mcp import McpUsageRow
from llmgw.gateway.usage import RowBuffer
from llmgw.store.store import Store

logger = logging.getLogger(__name__)


class Outcome(StrEnum):
    """How a tool call ended, as usage, the metrics and the span say it."""

    OK = "ok"
    ERROR = "error"  # the tool's own failure, or the upstream's (a result with isError)
    BLOCKED = "blocked"  # the guard withheld the arguments or the result
    REFUSED = "refused"  # over a limit: it never ran


class McpUsageMeter:
    """`record` never blocks; `flush` writes the deltas; a clean shutdown loses nothing."""

    def __init__(self, store: Store, now: Callable[[], datetime]) -> None:
        self._now = now
        self._rows = RowBuffer(McpUsageRow, ("key_id", "server", "tool", "day"),
                               lambda rows: store.mcp_usage.add(rows), "tool usage")
        self._day: date | None = None
        self._day_text = ""

    def record(self, key_id: str, server: str, tool: str, outcome: Outcome,
               cost: float | None = None) -> None:
        """Count one tool call that ended with `outcome`, costing `cost` (the server's
        `cost_per_call`). A refused call never ran: it is counted nowhere here."""
        if outcome == Outcome.REFUSED:
            return
        day = self._now().date()
        if day != self._day:
            self._day, self._day_text = day, day.isoformat()
        row = self._rows.counts((key_id, server, tool, self._day_text))
        row["calls"] += 1
        row["errors"] += outcome == Outcome.ERROR
        row["blocked"] += outcome == Outcome.BLOCKED
        if cost:
            row["cost"] += cost

    async def flush(self) -> None:
        """Write what was counted since the last flush; what could not be written is kept."""
        await self._rows.flush()

    async def run(self, interval_s: float) -> None:
        """Flush every `interval_s` until cancelled (the owner flushes once more on shutdown)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.flush()
            except LlmgwError as exc:  # the database is down: kept, said in one line
                logger.warning("tool usage not written (%s); kept for the next try", exc.message)
            except Exception:
                logger.exception("tool usage not written; kept for the next try")

