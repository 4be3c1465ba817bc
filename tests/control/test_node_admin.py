"""NodeAdmin on a real SQLite store with a fake clock: status, cordon, drain, labels, removal."""

from __future__ import annotations

import pytest

from llmgw.control.node_admin import NodeAdmin, NodeState
from llmgw.core.clock import FakeClock
from llmgw.core.errors import Conflict, InvalidRequest, NotFound
from llmgw.core.types import Replica, ReplicaState
from llmgw.store.store import Store
from tests.factories import NOW, node

TIMEOUT_S = 30.0


class Nodes:
    """A NodeAdmin, its clock, and how often it told the server something changed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = FakeClock(NOW)
        self.changes = 0

        async def changed() -> None:
            self.changes += 1

        self.admin = NodeAdmin(store, self.clock, TIMEOUT_S, on_change=changed)

    def add(self, node_id: str, replicas: int = 0) -> None:
        """A node that reports now, with `replicas` ready replicas on it."""
        self.store.nodes.upsert(node(node_id), self.clock.now())
        for i in range(replicas):
            self.store.replicas.create(
                Replica(id=f"{node_id}-r{i}", model="m1", node_id=node_id, state=ReplicaState.READY),
                self.clock.now(),
            )

    async def status(self, node_id: str) -> NodeState:
        return (await self.admin.show(node_id)).view.status


@pytest.fixture
def nodes(store: Store) -> Nodes:
    return Nodes(store)


async def test_list_shows_status_heartbeat_age_and_replica_count(nodes: Nodes) -> None:
    nodes.add("a", replicas=2)
    nodes.add("b")
    nodes.clock.advance(3)
    views = {v.node.id: v for v in await nodes.admin.list()}
    assert views["a"].status == NodeState.READY and views["a"].replica_count == 2
    assert views["b"].replica_count == 0
    assert views["a"].heartbeat_age_s == 3.0


async def test_a_node_silent_past_the_timeout_is_lost(nodes: Nodes) -> None:
    nodes.add("a")
    nodes.clock.advance(TIMEOUT_S)
    assert await nodes.status("a") == NodeState.READY  # exactly the timeout: not yet
    nodes.clock.advance(1)
    assert await nodes.status("a") == NodeState.LOST


async def test_lost_wins_over_cordoned_and_draining(nodes: Nodes) -> None:
    nodes.add("a")
    await nodes.admin.drain("a")
    assert await nodes.status("a") == NodeState.DRAINING
    nodes.clock.advance(TIMEOUT_S + 1)
    assert await nodes.status("a") == NodeState.LOST


async def test_cordon_then_drain_then_uncordon(nodes: Nodes) -> None:
    nodes.add("a", replicas=1)
    cordoned = await nodes.admin.cordon("a")
    assert cordoned.status == NodeState.CORDONED and cordoned.replica_count == 1
    drained = await nodes.admin.drain("a")
    assert drained.status == NodeState.DRAINING
    assert drained.node.cordoned and drained.node.draining  # draining implies cordoned
    back = await nodes.admin.uncordon("a")
    assert back.status == NodeState.READY and not back.node.cordoned and not back.node.draining
    assert nodes.changes == 3  # the server heard of every write


async def test_labels_are_set_and_removed(nodes: Nodes) -> None:
    nodes.add("a")
    await nodes.admin.label("a", {"zone": "eu-1", "gpu-node": ""}, [])
    view = await nodes.admin.label("a", {"rack": "r1/2"}, ["gpu-node"])
    assert view.node.labels == {"zone": "eu-1", "rack": "r1/2"}


@pytest.mark.parametrize(
    ("set_", "remove", "fragment"),
    [
        ({"bad key": "x"}, [], "label key 'bad key'"),
        ({"-zone": "x"}, [], "starting and ending"),
        ({"k" * 64: "x"}, [], "1-63"),
        ({"zone": "eu 1"}, [], "value 'eu 1'"),
        ({"zone": "v" * 64}, [], "at most 63"),
        ({"zone": "eu"}, ["zone"], "both set and removed: zone"),
        ({}, [""], "a label to remove"),
    ],
)
async def test_labels_that_break_the_rules_are_refused(
    nodes: Nodes, set_: dict[str, str], remove: list[str], fragment: str
) -> None:
    nodes.add("a")
    with pytest.raises(InvalidRequest) as caught:
        await nodes.admin.label("a", set_, remove)
    assert fragment in caught.value.message
    assert nodes.store.nodes.get("a").labels == {}  # type: ignore[union-attr]
    assert nodes.changes == 0


async def test_a_reporting_node_with_replicas_is_not_removed(nodes: Nodes) -> None:
    nodes.add("a", replicas=2)
    with pytest.raises(Conflict) as caught:
        await nodes.admin.remove("a")
    assert caught.value.code == "node_in_use" and caught.value.status == 409
    assert "2 replica(s)" in caught.value.message and "drain it first" in caught.value.message
    assert [v.node.id for v in await nodes.admin.list()] == ["a"]


async def test_a_draining_node_is_removed_once_its_replicas_are_gone(nodes: Nodes) -> None:
    nodes.add("a", replicas=1)
    await nodes.admin.drain("a")
    with pytest.raises(Conflict) as caught:
        await nodes.admin.remove("a")
    assert "wait until the drain" in caught.value.message
    nodes.store.replicas.delete("a-r0")  # the keeper moved it
    await nodes.admin.remove("a")
    assert await nodes.admin.list() == []


async def test_a_lost_node_is_removed_with_its_replicas(nodes: Nodes) -> None:
    nodes.add("a", replicas=1)
    nodes.clock.advance(TIMEOUT_S + 1)
    await nodes.admin.remove("a")
    assert await nodes.admin.list() == [] and nodes.store.replicas.list() == []


async def test_force_removes_a_busy_node(nodes: Nodes) -> None:
    nodes.add("a", replicas=1)
    nodes.add("b", replicas=1)
    await nodes.admin.remove("a", force=True)
    assert [n.id for n in nodes.store.nodes.list()] == ["b"]
    assert [r.node_id for r in nodes.store.replicas.list()] == ["b"]
    assert nodes.changes == 1


@pytest.mark.parametrize("action", ["show", "cordon", "uncordon", "drain", "remove", "label"])
async def test_an_unknown_node_is_not_found(nodes: Nodes, action: str) -> None:
    args: tuple[object, ...] = ({"a": "b"}, []) if action == "label" else ()
    with pytest.raises(NotFound) as caught:
        await getattr(nodes.admin, action)("ghost", *args)
    assert caught.value.status == 404 and "node 'ghost' does not exist" in caught.value.message
    assert nodes.changes == 0
