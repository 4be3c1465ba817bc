"""The node agent's plan: which engines to start, which to stop, which rows to forget."""

from __future__ import annotations

from llmgw.core.types import ReplicaState
from llmgw.node.agent import AgentPlan, Assignment, plan
from tests.factories import gemma_model, qwen_guard_model, replica_failed, replica_placed


def assigned(
    rid: str, state: ReplicaState = ReplicaState.STARTING, *, model: str = "gemma3-270m"
) -> Assignment:
    catalog = {"gemma3-270m": gemma_model(), "qwen3guard-0.6b": qwen_guard_model()}
    return Assignment(replica_placed(rid, model, state=state), catalog.get(model))


def test_nothing_assigned_and_nothing_running_does_nothing() -> None:
    assert plan([], set()) == AgentPlan()


def test_an_assigned_replica_that_is_not_running_is_started() -> None:
    a = assigned("r1")
    assert plan([a], set()) == AgentPlan(start=[a])


def test_a_failed_replica_whose_supervisor_is_gone_is_started_again() -> None:
    a = Assignment(replica_failed("r1"), gemma_model())
    assert plan([a], set()).start == [a]


def test_a_running_replica_that_is_still_assigned_is_left_alone() -> None:
    assert plan([assigned("r1", ReplicaState.READY)], {"r1"}) == AgentPlan()


def test_a_running_replica_no_longer_assigned_is_stopped() -> None:
    assert plan([assigned("r1")], {"r1", "r9", "r5"}) == AgentPlan(stop=["r5", "r9"])


def test_a_replica_marked_stopping_is_stopped_then_forgotten() -> None:
    leaving = assigned("r1", ReplicaState.STOPPING)

    first = plan([leaving], {"r1"})
    assert first == AgentPlan(stop=["r1"])

    # Once its engine is gone the row can go too.
    second = plan([leaving], set())
    assert second == AgentPlan(forget=["r1"])


def test_a_replica_whose_model_left_the_catalog_is_stopped_when_marked_stopping() -> None:
    orphan = Assignment(replica_placed("r1", "llama-3-8b", state=ReplicaState.STOPPING), None)
    assert plan([orphan], {"r1"}) == AgentPlan(stop=["r1"])


def test_a_mixed_round() -> None:
    keep = assigned("keep", ReplicaState.READY)
    new = assigned("new", model="qwen3guard-0.6b")
    leaving = assigned("leaving", ReplicaState.STOPPING)
    gone = assigned("gone", ReplicaState.STOPPING)

    result = plan([keep, new, leaving, gone], {"keep", "leaving", "unknown"})

    assert result == AgentPlan(start=[new], stop=["leaving", "unknown"], forget=["gone"])
