"""The replica keeper and node liveness: lost, draining and cordoned nodes (plain data)."""

from __future__ import annotations

from datetime import timedelta

from llmgw.control.replica_keeper import NODE_TIMEOUT, Forget, Pend, Place, Stop, plan
from llmgw.core.clock import FakeClock
from llmgw.core.types import ReplicaState
from tests.control.test_replica_keeper import apply, converge
from tests.factories import (
    NOW,
    gemma_model,
    node_2_cores,
    node_8_cores,
    qwen_guard_model,
    replica_failed,
    replica_placed,
    replica_ready,
    silent_node,
)

# --- node liveness -----------------------------------------------------------------------------


def test_a_node_whose_heartbeat_is_too_old_is_not_used() -> None:
    clock = FakeClock(NOW)
    model = gemma_model()
    silent = node_8_cores("silent", heartbeat_at=clock.now())
    clock.advance(NODE_TIMEOUT.total_seconds() + 1)

    [pend] = plan([model], [silent], [], clock.now())

    assert isinstance(pend, Pend)
    assert "no node is available" in pend.reason


def test_a_node_that_reported_within_the_timeout_is_used() -> None:
    clock = FakeClock(NOW)
    lively = node_2_cores("lively", heartbeat_at=clock.now())
    clock.advance(NODE_TIMEOUT.total_seconds())

    assert plan([gemma_model()], [lively], [], clock.now()) == [
        Place("gemma3-270m", "lively", "default", cpu_cores=1, memory_gb=1.0)
    ]


def test_a_live_node_is_chosen_over_a_bigger_silent_one() -> None:
    clock = FakeClock(NOW)
    silent = node_8_cores("silent", heartbeat_at=clock.now() - timedelta(minutes=5))
    lively = node_2_cores("lively", heartbeat_at=clock.now())

    actions = plan([gemma_model()], [silent, lively], [], clock.now())

    assert [a.node_id for a in actions if isinstance(a, Place)] == ["lively"]


def test_a_node_that_never_reported_is_not_used() -> None:
    never = node_8_cores("new", heartbeat_at=None)
    [pend] = plan([gemma_model()], [never], [], NOW)
    assert isinstance(pend, Pend)


def test_the_node_timeout_can_be_set() -> None:
    quiet = silent_node("quiet", silent_s=47)
    assert [type(a) for a in plan([gemma_model()], [quiet], [], NOW)] == [Pend]
    assert [type(a) for a in plan([gemma_model()], [quiet], [], NOW, timedelta(minutes=1))] == [Place]


# --- lost, draining and cordoned nodes ---------------------------------------------------------


def test_a_replica_on_a_lost_node_is_forgotten_and_replaced_elsewhere_in_the_same_plan() -> None:
    on_lost = replica_ready("r-lost", node_id="silent")

    actions = plan([gemma_model()], [silent_node("silent", silent_s=47), node_2_cores()], [on_lost], NOW)

    assert actions == [
        Forget("r-lost", "node silent is lost (no heartbeat for 47s)"),
        Place("gemma3-270m", "small", "default", cpu_cores=1, memory_gb=1.0),
    ]


def test_a_replica_whose_node_row_is_gone_is_forgotten_and_replaced() -> None:
    orphaned = replica_ready("r-x", node_id="decommissioned")

    actions = plan([gemma_model()], [node_2_cores()], [orphaned], NOW)

    assert actions == [
        Forget("r-x", "node decommissioned is gone"),
        Place("gemma3-270m", "small", "default", cpu_cores=1, memory_gb=1.0),
    ]


def test_only_the_replicas_on_the_lost_node_are_replaced() -> None:
    model = gemma_model(replicas=3)
    replicas = [replica_ready("r1", node_id="a"), replica_ready("r2", node_id="b"),
                replica_failed("r3", node_id="b")]
    nodes = [node_8_cores("a"), silent_node("b"), node_8_cores("c")]

    actions = plan([model], nodes, replicas, NOW)

    assert sorted(a.replica_id for a in actions if isinstance(a, Forget)) == ["r2", "r3"]
    # Spread: one replica is on a already, so c first, then a or c.
    assert [a.node_id for a in actions if isinstance(a, Place)][0] == "c"
    assert len([a for a in actions if isinstance(a, Place)]) == 2


def test_a_stopping_replica_on_a_lost_node_is_forgotten_too() -> None:
    # Nothing on a lost node will ever finish stopping it; its row would stay for good.
    leaving = replica_placed("r-old", node_id="silent", state=ReplicaState.STOPPING)
    assert plan([], [silent_node()], [leaving], NOW) == [
        Forget("r-old", "node silent is lost (no heartbeat for 47s)")
    ]


def test_replicas_of_a_lost_node_that_has_nowhere_else_to_go_wait_with_a_stable_reason() -> None:
    clock = FakeClock(NOW)
    models = [gemma_model()]
    nodes = [node_8_cores("only", heartbeat_at=NOW)]
    [running] = converge(models, nodes, [], clock.now())
    clock.advance(47)

    [pending] = converge(models, nodes, [running], clock.now())
    clock.advance(60)

    assert pending.node_id is None
    assert pending.last_error == "no node is available (none has reported in the last 30s)"
    assert plan(models, nodes, [pending], clock.now()) == []


def test_a_draining_node_keeps_its_replica_until_the_replacement_is_ready() -> None:
    on_old = replica_ready("r-old", node_id="old")
    nodes = [node_8_cores("old", draining=True), node_2_cores()]

    # Make before break: the replacement is placed first; the old one keeps serving meanwhile.
    assert plan([gemma_model()], nodes, [on_old], NOW) == [
        Place("gemma3-270m", "small", "default", cpu_cores=1, memory_gb=1.0),
    ]
    starting = replica_placed("r-new", node_id="small")
    assert plan([gemma_model()], nodes, [on_old, starting], NOW) == []

    ready = replica_ready("r-new", node_id="small")
    assert plan([gemma_model()], nodes, [on_old, ready], NOW) == [
        Stop("r-old", "node old is draining (1 ready elsewhere)"),
    ]


def test_draining_then_scaling_down_stops_each_replica_once() -> None:
    model = gemma_model(replicas=1)
    replicas = [replica_ready("r-old", node_id="old"), replica_ready("r-new", node_id="small")]
    nodes = [node_8_cores("old", draining=True), node_2_cores()]

    assert plan([model], nodes, replicas, NOW) == [
        Stop("r-old", "node old is draining (1 ready elsewhere)")
    ]


def test_a_draining_node_converges_to_empty() -> None:
    models = [gemma_model(replicas=2), qwen_guard_model()]
    nodes = [node_8_cores("old"), node_8_cores("new")]
    running = converge(models, nodes, [])
    assert {r.node_id for r in running} == {"old", "new"}

    draining = [nodes[0].model_copy(update={"draining": True}), nodes[1]]
    placed = apply(running, plan(models, draining, running, NOW))
    # The agents start the replacements; only then do the old replicas stop.
    started = [r.model_copy(update={"state": ReplicaState.READY}) for r in placed]
    drained = converge(models, draining, apply(started, plan(models, draining, started, NOW)))

    live = [r for r in drained if r.state != ReplicaState.STOPPING]
    assert sorted(r.model for r in live) == ["gemma3-270m", "gemma3-270m", "qwen3guard-0.6b"]
    assert {r.node_id for r in live} == {"new"}


def test_a_cordoned_node_keeps_its_replicas_but_gets_no_new_ones() -> None:
    model = gemma_model(replicas=2)
    running = replica_ready("r1", node_id="big")

    actions = plan([model], [node_8_cores(cordoned=True), node_2_cores()], [running], NOW)

    assert actions == [Place("gemma3-270m", "small", "default", cpu_cores=1, memory_gb=1.0)]




def test_a_new_leader_gives_nodes_a_full_timeout_from_its_election() -> None:
    # The database was down for 47 s: no node could report, yet none is gone.
    replicas = [replica_ready("r1", node_id="silent")]
    nodes = [silent_node()]
    elected = NOW - timedelta(seconds=1)

    assert plan([gemma_model()], nodes, replicas, NOW, leading_since=elected) == []
    # A node that really is gone is lost a timeout after the election.
    later = elected + timedelta(seconds=31)
    assert plan([gemma_model()], nodes, replicas, later, leading_since=elected)[0] == \
        Forget("r1", "node silent is lost (no heartbeat for 77s)")
