"""Tool usage per key, server, tool and day: counted as calls end, written in batches that add
up across every worker and server, with the server's cost per call; a refused call costs
nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from llmgw.core.clock import FakeClock
from llmgw.core.errors import StoreUnavailable
from llmgw.core.mcp import McpUsageRow
from llmgw.gateway.mcp.usage import McpUsageMeter, Outcome
from llmgw.store.schema import mcp_usage
from llmgw.store.store import Store


def written(store: Store) -> dict[tuple[str, str, str, str], McpUsageRow]:
    with store.engine.connect() as conn:
        found = [McpUsageRow(**r._mapping) for r in conn.execute(select(mcp_usage)).all()]
    return {(r.key_id, r.server, r.tool, r.day): r for r in found}


async def test_two_workers_usage_adds_up_in_one_row_with_the_cost_per_call(
        store: Store, clock: FakeClock) -> None:
    first, second = McpUsageMeter(store, clock.now), McpUsageMeter(store, clock.now)
    for outcome in (Outcome.OK, Outcome.OK, Outcome.ERROR):
        first.record("key-a", "github", "search", outcome, 0.25)
    second.record("key-a", "github", "search", Outcome.BLOCKED, 0.25)
    second.record("key-a", "github", "search", Outcome.REFUSED, 0.25)  # never ran: not counted
    await first.flush()
    await second.flush()
    await first.flush()  # nothing new: adds nothing
    row = written(store)[("key-a", "github", "search", clock.now().date().isoformat())]
    assert (row.calls, row.errors, row.blocked, row.cost) == (4, 1, 1, 1.0)


async def test_calls_on_two_days_are_two_rows_and_a_free_server_costs_nothing(
        store: Store, clock: FakeClock) -> None:
    meter = McpUsageMeter(store, clock.now)
    today = clock.now().date().isoformat()
    meter.record("key-a", "files", "read", Outcome.OK)
    clock.advance(timedelta(days=1).total_seconds())
    meter.record("key-a", "files", "read", Outcome.OK)
    await meter.flush()
    rows = written(store)
    tomorrow = clock.now().date().isoformat()
    assert rows[("key-a", "files", "read", today)].calls == 1
    assert rows[("key-a", "files", "read", tomorrow)].calls == 1
    assert rows[("key-a", "files", "read", today)].cost == 0.0


async def test_usage_the_store_could_not_take_is_kept_for_the_next_flush(
        store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    meter = McpUsageMeter(store, clock.now)
    meter.record("key-a", "github", "search", Outcome.OK, 0.5)

    def down(_rows: object) -> None:
        raise StoreUnavailable("the database is down")

    monkeypatch.setattr(store.mcp_usage, "add", down)
    with pytest.raises(StoreUnavailable):
        await meter.flush()
    monkeypatch.undo()
    meter.record("key-a", "github", "search", Outcome.OK, 0.5)
    await meter.flush()
    row = written(store)[("key-a", "github", "search", clock.now().date().isoformat())]
    assert (row.calls, row.cost) == (2, 1.0)
