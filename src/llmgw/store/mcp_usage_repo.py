"""The write side of MCP tool usage (`mcp_usage`): additive, so any number of servers and
workers can flush their deltas (the console's reads are the catalog's, `mcp_repo`)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Engine

from llmgw.core.mcp import McpUsageRow
from llmgw.store.schema import mcp_usage
from llmgw.store.usage_repo import add_rows


class McpUsageRepo:
    """Adds tool calls per key, server, tool and day."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add(self, rows: Iterable[McpUsageRow]) -> None:
        """Add the rows' counts in one transaction; StoreRefused when the database refuses the
        data (a count out of range), so the caller can write the other rows without it."""
        add_rows(self._engine, mcp_usage, rows, ("key_id", "server", "tool", "day"), "tool usage")
