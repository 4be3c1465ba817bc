"""The write side of MCP tool usage (`mcp_usage`): additive, so any number of servers and
workers can flush their deltas (the console's reads are the catalog's, `mcp_repo`)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Engine
from sqlalchemy.exc import DataError, IntegrityError

from llmgw.core.errors import StoreRefused
from llmgw.core.mcp import McpUsageRow
from llmgw.store.schema import mcp_usage
from llmgw.store.usage_repo import add_counts

# A row's counts: every field of it but the four that name it.
MCP_COUNTERS = tuple(f for f in McpUsageRow.model_fields
                     if f not in ("key_id", "server", "tool", "day"))


class McpUsageRepo:
    """Adds tool calls per key, server, tool and day."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add(self, rows: Iterable[McpUsageRow]) -> None:
        """Add the rows' counts in one transaction; StoreRefused when the database refuses the
        data (a count out of range), so the caller can write the other rows without it."""
        try:
            with self._engine.begin() as conn:
                for r in rows:
                    add_counts(conn, mcp_usage,
                               {"key_id": r.key_id, "server": r.server, "tool": r.tool, "day": r.day},
                               {c: getattr(r, c) for c in MCP_COUNTERS})
        except (DataError, IntegrityError, OverflowError) as exc:
            raise StoreRefused(f"tool usage not written: {type(exc).__name__}") from exc
