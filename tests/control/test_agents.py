"""The servers' side of node agents, on a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from llmgw.control.agents import AgentService
from llmgw.core.agent_wire import ReplicaReport, SyncRequest
from llmgw.core.clock import FakeClock
from llmgw.core.errors import NodeIdTaken
from llmgw.core.types import Replica, ReplicaState
from llmgw.store.store import Store
from tests.factories import NOW, local_model, node


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    yield s
    s.close()


def placed(id: str, node_id: str = "node-a", state: ReplicaState = ReplicaState.STARTING) -> Replica:
    return Replica(id=id, model="m1", node_id=node_id, profile="cpu", state=state)


class Changes:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


def service(store: Store, changes: Changes) -> AgentService:
    return AgentService(store, FakeClock(NOW), "engine-secret", changes)


async def test_a_first_sync_registers_the_node_and_hands_out_its_replicas(store: Store) -> None:
    store.catalog.add(local_model("m1"), "test", NOW)
    store.replicas.create(placed("r1"), NOW)
    store.replicas.create(placed("r2", node_id="node-b"), NOW)
    answer = await service(store, Changes()).sync(SyncRequest(node=node("node-a", labels={"role": "judge"})))

    assert [a.replica.id for a in answer.assignments] == ["r1"]
    assert answer.assignments[0].model is not None and answer.assignments[0].model.name == "m1"
    assert answer.engine_key == "engine-secret"
    registered = {n.id: n for n in store.nodes.list()}["node-a"]
    assert registered.labels["role"] == "judge" and registered.heartbeat_at == NOW


async def test_reports_update_only_replicas_placed_on_that_node(store: Store) -> None:
    store.replicas.create(placed("mine"), NOW)
    store.replicas.create(placed("theirs", node_id="node-b"), NOW)
    changes = Changes()
    ready = ReplicaReport(id="mine", state=ReplicaState.READY, endpoint="http://127.0.0.11:9000/v1")
    # A report about a replica since moved to another node (this one was cut off) changes nothing.
    stale = ReplicaReport(id="theirs", state=ReplicaState.FAILED, last_error="gone")
    await service(store, changes).sync(SyncRequest(node=node("node-a"), replicas=[ready, stale]))

    rows = {r.id: r for r in store.replicas.list()}
    assert rows["mine"].state == ReplicaState.READY
    assert rows["mine"].endpoint == "http://127.0.0.11:9000/v1"
    assert rows["theirs"].state == ReplicaState.STARTING and rows["theirs"].last_error is None
    assert changes.count == 1


async def test_a_quiet_heartbeat_does_not_move_the_revision(store: Store) -> None:
    store.replicas.create(placed("r1", state=ReplicaState.READY), NOW)
    svc = service(store, Changes())
    await svc.sync(SyncRequest(node=node("node-a")))
    before = store.revision()
    same = ReplicaReport(id="r1", state=ReplicaState.READY)
    await svc.sync(SyncRequest(node=node("node-a"), replicas=[same]))
    # Every server rebuilds its caches on a new revision: a node that only says "alive" must not.
    assert store.revision() == before


async def test_stopped_replicas_marked_stopping_are_forgotten(store: Store) -> None:
    store.replicas.create(placed("old", state=ReplicaState.STOPPING), NOW)
    store.replicas.create(placed("live", state=ReplicaState.READY), NOW)
    answer = await service(store, Changes()).sync(
        SyncRequest(node=node("node-a"), stopped=["old", "live"])
    )
    # Only a replica the servers asked to stop goes; a live one is not deleted by a confused agent.
    assert [r.id for r in store.replicas.list()] == ["live"]
    assert [a.replica.id for a in answer.assignments] == ["live"]


async def test_a_second_machine_claiming_a_live_nodes_id_is_refused(store: Store) -> None:
    clock = FakeClock(NOW)
    svc = AgentService(store, clock, "k", Changes(), node_timeout=timedelta(seconds=30))
    await svc.sync(SyncRequest(node=node("gpu-1"), agent="agent-first"))

    with pytest.raises(NodeIdTaken, match="node gpu-1 is already reported by another agent"):
        await svc.sync(SyncRequest(node=node("gpu-1", address="10.0.0.9"), agent="agent-clone"))
    assert store.nodes.get("gpu-1").address == "127.0.0.1"  # the first one's registration stands

    # The same agent, restarted, keeps its id and is welcome; a node silent past the timeout
    # may be taken over (the machine was replaced).
    await svc.sync(SyncRequest(node=node("gpu-1"), agent="agent-first"))
    clock.advance(31)
    await svc.sync(SyncRequest(node=node("gpu-1", address="10.0.0.9"), agent="agent-clone"))
    assert store.nodes.get("gpu-1").address == "10.0.0.9"
