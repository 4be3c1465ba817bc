"""Each server's demand in the store, merged over the live servers for the leader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from llmgw.core.demand import Activity, Queued, ReplicaUse
from llmgw.core.guard import JudgeLoad
from llmgw.store.store import Store

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TIMEOUT = timedelta(seconds=30)


def two_servers_waiting(store: Store) -> None:
    """Server a has two requests queued for gemma and one in flight; b has one queued."""
    store.servers.heartbeat("a", "http://a", T0)
    store.servers.heartbeat("b", "http://b", T0)
    store.servers.set_activity("a", Activity(
        queued={"gemma": Queued(waiting=2, since=T0)},
        replicas={"rep-1": ReplicaUse(in_flight=1, last_used=T0)}, at=T0))
    store.servers.set_activity("b", Activity(
        queued={"gemma": Queued(waiting=1, since=T0 - timedelta(seconds=3))},
        replicas={"rep-1": ReplicaUse(in_flight=0, last_used=T0 + timedelta(seconds=1))}, at=T0))


def test_the_leader_sees_every_live_servers_demand_added_up(store: Store) -> None:
    two_servers_waiting(store)
    merged = store.servers.activity(T0 + timedelta(seconds=1), TIMEOUT)
    assert merged.queued == {"gemma": Queued(waiting=3, since=T0 - timedelta(seconds=3))}
    assert merged.replicas["rep-1"] == ReplicaUse(in_flight=1, last_used=T0 + timedelta(seconds=1))


def test_a_gone_servers_queue_and_requests_in_flight_no_longer_count(store: Store) -> None:
    two_servers_waiting(store)
    store.servers.heartbeat("b", "http://b", T0 + TIMEOUT * 2)
    merged = store.servers.activity(T0 + TIMEOUT * 2, TIMEOUT)
    assert merged.queued["gemma"].waiting == 1
    assert merged.replicas["rep-1"].in_flight == 0


def test_a_queue_that_forms_wakes_the_other_servers_but_routine_reports_do_not(store: Store) -> None:
    store.servers.heartbeat("a", "http://a", T0)
    before = store.revision()
    store.servers.set_activity("a", Activity(at=T0))
    assert store.revision() == before
    store.servers.set_activity("a", Activity(queued={"gemma": Queued(waiting=1, since=T0)}, at=T0),
                               bump=True)
    assert store.revision() == before + 1


def test_the_judges_admission_adds_up_over_the_live_servers_and_its_slots_count_once(
    store: Store,
) -> None:
    # Two processes (or servers) admitting to the same two-slot replica.
    for server, queued, shed in (("a", 3, 10), ("b", 2, 5)):
        store.servers.heartbeat(server, f"http://{server}", T0)
        store.servers.set_activity(server, Activity(judges={"demo-judge": JudgeLoad(
            slots=2, in_flight=2, queued=queued, waited=20, shed=shed, served=100)}, at=T0))
    merged = store.servers.activity(T0 + timedelta(seconds=1), TIMEOUT)
    assert merged.judges == {"demo-judge": JudgeLoad(slots=2, in_flight=4, queued=5, waited=40,
                                                     shed=15, served=200)}
