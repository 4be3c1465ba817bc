"""This server's demand reaches the store: at once for a cold queue, else when it changes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.demand import Activity, Queued, ReplicaUse
from llmgw.server.demand import REWRITE_S, ActivityReporter
from llmgw.store.store import Store
from tests.factories import NOW

TIMEOUT = timedelta(seconds=30)


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    sqlite_store.servers.heartbeat("server-a", "http://a", NOW)
    return sqlite_store


class Demand:
    """What the request path would report: set by the test."""

    def __init__(self) -> None:
        self.now = Activity()

    def __call__(self, at: object) -> Activity:
        return self.now


async def test_a_cold_queue_is_written_at_once_and_wakes_the_leader(store: Store) -> None:
    clock, demand = FakeClock(NOW), Demand()
    woken: list[str] = []
    reporter = ActivityReporter(store, "server-a", clock, lambda: woken.append("this server"))
    await reporter.report(demand)
    revision = store.revision()
    demand.now = Activity(queued={"gemma": Queued(waiting=1, since=NOW)})
    reporter.cold("gemma")
    await reporter.report(demand)
    assert store.revision() == revision + 1
    assert woken == ["this server"]  # the leader may be this very server
    assert store.servers.activity(NOW, TIMEOUT).queued == {"gemma": Queued(waiting=1, since=NOW)}


async def test_routine_changes_are_written_without_waking_anyone(store: Store) -> None:
    clock, demand = FakeClock(NOW), Demand()
    reporter = ActivityReporter(store, "server-a", clock)
    await reporter.report(demand)
    revision = store.revision()
    demand.now = Activity(replicas={"rep-1": ReplicaUse(in_flight=2, last_used=NOW)})
    await reporter.report(demand)
    assert store.servers.activity(NOW, TIMEOUT).replicas["rep-1"].in_flight == 2
    assert store.revision() == revision


async def test_an_unchanged_activity_is_rewritten_only_when_due(store: Store) -> None:
    clock, demand = FakeClock(NOW), Demand()
    writes: list[Activity] = []
    real = store.servers.set_activity
    store.servers.set_activity = lambda sid, act, bump=False: (writes.append(act), real(sid, act, bump))  # type: ignore[method-assign]
    reporter = ActivityReporter(store, "server-a", clock)
    await reporter.report(demand)
    await reporter.report(demand)
    assert len(writes) == 1
    clock.advance(REWRITE_S)
    await reporter.report(demand)
    assert len(writes) == 2
