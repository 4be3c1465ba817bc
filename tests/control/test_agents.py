"""The servers' side of node agents, on a real SQLite store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from llmgw.control.agents import AgentService
from llmgw.core.agent_wire import ReplicaReport, SyncRequest
from llmgw.core.clock import FakeClock
from llmgw.core.engine_keys import EngineKeys
from llmgw.core.errors import Forbidden, NodeIdTaken
from llmgw.core.types import ApiKey, KeyScope, Replica, ReplicaState
from llmgw.store.store import Store
from tests.factories import NOW, api_key, local_model, node


def placed(id: str, node_id: str = "node-a", state: ReplicaState = ReplicaState.STARTING) -> Replica:
    return Replica(id=id, model="m1", node_id=node_id, profile="cpu", state=state)


class Changes:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


# The install's engine-key root, which only servers hold.
KEYS = EngineKeys("llmgw-engine-root")


def service(store: Store, changes: Changes) -> AgentService:
    return AgentService(store, FakeClock(NOW), KEYS, changes)


def join_token(store: Store, node_id: str | None = None) -> ApiKey:
    """A node join token in the store (bound to `node_id` when given)."""
    _, key = api_key(scope=KeyScope.NODE)
    # Names of live keys are unique: each token its own.
    key = key.model_copy(update={"name": f"join-{key.id}", "created_at": NOW, "node_id": node_id})
    store.keys.create(key)
    return key


async def test_a_first_sync_registers_the_node_and_hands_out_its_replicas(store: Store) -> None:
    store.catalog.add(local_model("m1"), "test", NOW)
    store.replicas.create(placed("r1"), NOW)
    store.replicas.create(placed("r2", node_id="node-b"), NOW)
    answer = await service(store, Changes()).sync(
        SyncRequest(node=node("node-a", labels={"role": "judge"}), agent="agent-a"), join_token(store))

    assert [a.replica.id for a in answer.assignments] == ["r1"]
    assert answer.assignments[0].model is not None and answer.assignments[0].model.name == "m1"
    assert answer.engine_key == KEYS.for_node("node-a")
    registered = {n.id: n for n in store.nodes.list()}["node-a"]
    assert registered.labels["role"] == "judge" and registered.heartbeat_at == NOW


async def test_reports_update_only_replicas_placed_on_that_node(store: Store) -> None:
    store.replicas.create(placed("mine"), NOW)
    store.replicas.create(placed("theirs", node_id="node-b"), NOW)
    changes = Changes()
    ready = ReplicaReport(id="mine", state=ReplicaState.READY, endpoint="http://127.0.0.11:9000/v1")
    # A report about a replica since moved to another node (this one was cut off) changes nothing.
    stale = ReplicaReport(id="theirs", state=ReplicaState.FAILED, last_error="gone")
    await service(store, changes).sync(SyncRequest(
        node=node("node-a", address="127.0.0.11"), agent="agent-a", replicas=[ready, stale]),
        join_token(store))

    rows = {r.id: r for r in store.replicas.list()}
    assert rows["mine"].state == ReplicaState.READY
    assert rows["mine"].endpoint == "http://127.0.0.11:9000/v1"
    assert rows["theirs"].state == ReplicaState.STARTING and rows["theirs"].last_error is None
    assert changes.count == 1


async def test_a_quiet_heartbeat_does_not_move_the_revision(store: Store) -> None:
    store.replicas.create(placed("r1", state=ReplicaState.READY), NOW)
    svc = service(store, Changes())
    token = join_token(store)
    await svc.sync(SyncRequest(node=node("node-a"), agent="agent-a"), token)
    before = store.revision()
    same = ReplicaReport(id="r1", state=ReplicaState.READY)
    await svc.sync(SyncRequest(node=node("node-a"), agent="agent-a", replicas=[same]), token)
    # Every server rebuilds its caches on a new revision: a node that only says "alive" must not.
    assert store.revision() == before


async def test_stopped_replicas_marked_stopping_are_forgotten(store: Store) -> None:
    store.replicas.create(placed("old", state=ReplicaState.STOPPING), NOW)
    store.replicas.create(placed("live", state=ReplicaState.READY), NOW)
    answer = await service(store, Changes()).sync(
        SyncRequest(node=node("node-a"), agent="agent-a", stopped=["old", "live"]), join_token(store)
    )
    # Only a replica the servers asked to stop goes; a live one is not deleted by a confused agent.
    assert [r.id for r in store.replicas.list()] == ["live"]
    assert [a.replica.id for a in answer.assignments] == ["live"]


async def test_a_second_machine_claiming_a_live_nodes_id_is_refused(store: Store) -> None:
    clock = FakeClock(NOW)
    svc = AgentService(store, clock, KEYS, Changes(), node_timeout=timedelta(seconds=30))
    token = join_token(store)
    await svc.sync(SyncRequest(node=node("gpu-1"), agent="agent-first"), token)

    with pytest.raises(NodeIdTaken, match="node gpu-1 is already reported by another agent"):
        await svc.sync(SyncRequest(node=node("gpu-1", address="10.0.0.9"), agent="agent-clone"),
                       token)
    assert store.nodes.get("gpu-1").address == "127.0.0.1"  # the first one's registration stands

    # The same agent, restarted, keeps its id and is welcome; a node silent past the timeout
    # may be taken over (the machine was replaced) by an agent holding its token.
    await svc.sync(SyncRequest(node=node("gpu-1"), agent="agent-first"), token)
    clock.advance(31)
    await svc.sync(SyncRequest(node=node("gpu-1", address="10.0.0.9"), agent="agent-clone"), token)
    assert store.nodes.get("gpu-1").address == "10.0.0.9"


# --- a join token speaks for its own node only -------------------------------------------------


async def test_a_token_reports_only_as_the_node_its_first_report_bound(store: Store) -> None:
    svc = service(store, Changes())
    token = join_token(store)
    await svc.sync(SyncRequest(node=node("node-a", cores=4), agent="agent-a"), token)

    with pytest.raises(Forbidden, match="bound to node node-a and cannot report as node-b"):
        await svc.sync(SyncRequest(node=node("node-b"), agent="agent-a"), token)
    assert store.nodes.get("node-b") is None
    assert store.keys.get(token.id).node_id == "node-a"


async def test_a_nodes_token_gets_its_own_nodes_engine_key_and_no_other(store: Store) -> None:
    svc = service(store, Changes())
    token_a, token_b = join_token(store), join_token(store)
    key_a = (await svc.sync(SyncRequest(node=node("node-a"), agent="agent-a"), token_a)).engine_key
    key_b = (await svc.sync(SyncRequest(node=node("node-b"), agent="agent-b"), token_b)).engine_key
    # Each node's own, none the install's root: a leaked token opens its own node's engines.
    assert key_a == KEYS.for_node("node-a") and key_b == KEYS.for_node("node-b")
    assert len({key_a, key_b, KEYS.root}) == 3
    # Node A's token asking as node B, or as a server's own node, gets no key at all.
    for other in ("node-b", "local"):
        with pytest.raises(Forbidden):
            await svc.sync(SyncRequest(node=node(other), agent="agent-a"), token_a)
    # The same node asking again (its agent restarted) gets the same key.
    again = await svc.sync(SyncRequest(node=node("node-a"), agent="agent-a"), token_a)
    assert again.engine_key == key_a


async def test_a_token_cannot_rewrite_another_tokens_node_even_as_its_agent(store: Store) -> None:
    store.replicas.create(placed("r1"), NOW)
    svc = service(store, Changes())
    await svc.sync(SyncRequest(node=node("node-a", cores=4), agent="agent-a"), join_token(store))

    # Same node id, same agent id (it is no secret): another token is still another machine.
    thief = join_token(store)
    evil = ReplicaReport(id="r1", state=ReplicaState.READY, endpoint="http://10.6.6.6:80/v1")
    with pytest.raises(Forbidden, match="node node-a is bound to another join token"):
        await svc.sync(SyncRequest(node=node("node-a", cores=64, address="10.6.6.6"),
                                   agent="agent-a", replicas=[evil]), thief)
    assert store.nodes.get("node-a").cores == 4
    assert {r.id: r for r in store.replicas.list()}["r1"].endpoint is None


async def test_a_token_created_for_a_node_reports_as_that_node_only(store: Store) -> None:
    svc = service(store, Changes())
    with pytest.raises(Forbidden, match="bound to node gpu-2"):
        await svc.sync(SyncRequest(node=node("gpu-1"), agent="agent-a"), join_token(store, "gpu-2"))
    await svc.sync(SyncRequest(node=node("gpu-2"), agent="agent-a"), join_token(store, "gpu-2"))
    assert store.nodes.get("gpu-2") is not None and store.nodes.get("gpu-1") is None


async def test_no_token_reports_as_a_servers_own_node(store: Store) -> None:
    svc = service(store, Changes())
    # `local` is refused even before the embedded agent of a server registered it.
    with pytest.raises(Forbidden, match="node local is a server's own node"):
        await svc.sync(SyncRequest(node=node("local"), agent="agent-a"), join_token(store))
    store.nodes.upsert(node("box-1", cores=2), NOW)  # a server with node_id = "box-1"
    with pytest.raises(Forbidden, match="node box-1 is a server's own node"):
        await svc.sync(SyncRequest(node=node("box-1", cores=64), agent="agent-a"),
                       join_token(store))
    assert store.nodes.get("box-1").cores == 2
    assert store.nodes.get("local") is None


async def test_a_replica_endpoint_off_the_nodes_own_address_is_refused(store: Store) -> None:
    store.replicas.create(placed("r1"), NOW)
    store.replicas.create(placed("r2"), NOW)
    changes = Changes()
    evil = ReplicaReport(id="r1", state=ReplicaState.READY, endpoint="http://10.6.6.6:8080/v1")
    good = ReplicaReport(id="r2", state=ReplicaState.READY, endpoint="http://10.0.0.7:9000/v1")
    await service(store, changes).sync(SyncRequest(
        node=node("node-a", address="10.0.0.7"), agent="agent-a", replicas=[evil, good]),
        join_token(store))

    rows = {r.id: r for r in store.replicas.list()}
    assert rows["r1"].state == ReplicaState.FAILED and rows["r1"].endpoint is None
    assert "off its own address 10.0.0.7" in (rows["r1"].last_error or "")
    assert rows["r2"].state == ReplicaState.READY and rows["r2"].endpoint == "http://10.0.0.7:9000/v1"
