"""Tool usage: calls, errors, withheld results and cost per key, server, tool and day, counted
in memory as calls end and written in batches (additive upserts into `mcp_usage`, so every
worker and server adds its own), as the model path's usage meter does (principle 2: the hot
path never waits on the database)."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import date, datetime
from enum import StrEnum

from llmgw.core.errors import LlmgwError, StoreRefused
from llmgw.core.mcp import McpUsageRow
from llmgw.store.mcp_usage_repo import MCP_COUNTERS
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

_Key = tuple[str, str, str, str]  # key id, server, tool, day


class Outcome(StrEnum):
    """How a tool call ended, as usage, the metrics and the span say it."""

    OK = "ok"
    ERROR = "error"  # the tool's own failure, or the upstream's (a result with isError)
    BLOCKED = "blocked"  # the guard withheld the arguments or the result
    REFUSED = "refused"  # over a limit: it never ran


def _zero() -> dict[str, float]:
    return dict.fromkeys(MCP_COUNTERS, 0)


class McpUsageMeter:
    """`record` never blocks; `flush` writes the deltas; a clean shutdown loses nothing."""

    def __init__(self, store: Store, now: Callable[[], datetime]) -> None:
        self._store = store
        self._now = now
        self._buf: defaultdict[_Key, dict[str, float]] = defaultdict(_zero)
        self._lock = asyncio.Lock()
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
        row = self._buf[(key_id, server, tool, self._day_text)]
        row["calls"] += 1
        row["errors"] += outcome == Outcome.ERROR
        row["blocked"] += outcome == Outcome.BLOCKED
        if cost:
            row["cost"] += cost

    async def flush(self) -> None:
        """Write what was counted since the last flush; what could not be written is kept."""
        async with self._lock:
            batch, self._buf = self._buf, defaultdict(_zero)
            if not batch:
                return
            rows = [_row(k, counts) for k, counts in batch.items()]
            try:
                await asyncio.to_thread(self._store.mcp_usage.add, rows)
            except StoreRefused:
                await self._one_by_one(rows)
            except BaseException:
                self._keep(rows)
                raise

    async def _one_by_one(self, rows: list[McpUsageRow]) -> None:
        """Each row on its own, so a row the database refuses holds back no other."""
        for i, row in enumerate(rows):
            try:
                await asyncio.to_thread(self._store.mcp_usage.add, [row])
            except StoreRefused as exc:
                logger.error("tool usage row refused by the database, dropped: key %s, server %s, "
                             "tool %s, day %s: %s", row.key_id, row.server, row.tool, row.day,
                             exc.message)
            except BaseException:
                self._keep(rows[i:])
                raise

    def _keep(self, rows: list[McpUsageRow]) -> None:
        for r in rows:
            counts = self._buf[(r.key_id, r.server, r.tool, r.day)]
            for name in MCP_COUNTERS:
                counts[name] += getattr(r, name)

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


def _row(key: _Key, counts: dict[str, float]) -> McpUsageRow:
    key_id, server, tool, day = key
    return McpUsageRow(key_id=key_id, server=server, tool=tool, day=day,
                       calls=int(counts["calls"]), errors=int(counts["errors"]),
                       blocked=int(counts["blocked"]), cost=counts["cost"])
