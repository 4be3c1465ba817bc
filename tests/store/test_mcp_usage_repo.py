"""Tool usage writes are additive: any number of servers add to one row of key, server, tool and
day, on each backend."""

from __future__ import annotations

from sqlalchemy import select

from llmgw.core.mcp import McpUsageRow
from llmgw.store.schema import mcp_usage
from llmgw.store.store import Store


def rows(store: Store) -> list[McpUsageRow]:
    with store.engine.connect() as conn:
        found = conn.execute(select(mcp_usage).order_by(mcp_usage.c.key_id, mcp_usage.c.tool))
        return [McpUsageRow(**r._mapping) for r in found.all()]


def test_two_writers_adding_to_the_same_row_sum_every_count(store: Store) -> None:
    day = "2026-12-05"
    store.mcp_usage.add([McpUsageRow(key_id="key-a", server="github", tool="search", day=day,
                                     calls=3, errors=1, blocked=0, cost=0.03)])
    store.mcp_usage.add([McpUsageRow(key_id="key-a", server="github", tool="search", day=day,
                                     calls=2, errors=0, blocked=1, cost=0.02),
                         McpUsageRow(key_id="key-a", server="github", tool="issue", day=day,
                                     calls=1)])
    issue, search = rows(store)
    assert (search.calls, search.errors, search.blocked) == (5, 1, 1)
    assert abs(search.cost - 0.05) < 1e-9
    assert (issue.calls, issue.cost) == (1, 0.0)
