"""Swap by memory: which idle replicas make room for a waiting model, with plain data."""

from __future__ import annotations

from llmgw.control.eviction import candidates, choose
from llmgw.control.scheduler import Cluster
from llmgw.core.types import Model, Node, Replica, ReplicaState
from tests.demand_factories import activity, ago, four_gb_node, on_demand_model, running, use
from tests.factories import NOW, qwen_guard_model, replica_placed

# Three on-demand models of 2 GB each and the one that waits for room (also 2 GB).
LLAMA, PHI, MISTRAL, WAITING = "llama-3-8b", "phi-4", "mistral-7b", "gemma3-270m"


def catalog(*extra: Model) -> dict[str, Model]:
    models = [on_demand_model(n, max=2) for n in (LLAMA, PHI, MISTRAL, WAITING)] + list(extra)
    return {m.name: m for m in models}


def evict(nodes: list[Node], replicas: list[Replica], models: dict[str, Model] | None = None,
          used: dict[str, tuple[int, float]] | None = None) -> tuple[str, list[str]] | None:
    """Where the waiting model goes and whom it stops, `used`: replica → (in flight, s ago)."""
    models = models or catalog()
    act = activity(queued={WAITING: 1},
                   replicas=use(**{r: (n, ago(s)) for r, (n, s) in (used or {}).items()}))
    found = choose(models[WAITING], Cluster(nodes, replicas, NOW), models, replicas, act)
    return None if found is None else (found.placement.node_id, [v.id for v in found.victims])


def test_the_least_recently_used_replica_on_a_full_node_makes_room() -> None:
    full = [running("r-llama", LLAMA), running("r-phi", PHI)]
    assert evict([four_gb_node()], full, used={"r-llama": (0, 60), "r-phi": (0, 600)}) == (
        "node-1", ["r-phi"])


def test_the_node_whose_victims_are_least_recently_used_is_chosen() -> None:
    replicas = [running("r-llama", LLAMA, node_id="node-1"), running("r-phi", PHI, node_id="node-1"),
                running("r-mistral", MISTRAL, node_id="node-2"),
                running("r-llama-2", LLAMA, node_id="node-2")]
    used = {"r-llama": (0, 100), "r-phi": (0, 200), "r-mistral": (0, 3600), "r-llama-2": (0, 50)}
    assert evict([four_gb_node("node-1"), four_gb_node("node-2")], replicas, used=used) == (
        "node-2", ["r-mistral"])


def test_victims_all_come_from_one_node_that_frees_enough() -> None:
    # The waiting model needs 4 GB. node-2's idle mistral is the least recently used replica,
    # but the judge beside it stays, so only node-1 can free 4 GB: both of its replicas go.
    big = on_demand_model(WAITING, memory_gb=4.0)
    judge = qwen_guard_model(replicas=0)
    replicas = [running("r-llama", LLAMA, node_id="node-1"), running("r-phi", PHI, node_id="node-1"),
                running("r-mistral", MISTRAL, node_id="node-2"),
                running("r-judge", judge.name, node_id="node-2")]
    used = {"r-llama": (0, 60), "r-phi": (0, 120), "r-mistral": (0, 3600)}
    models = catalog(judge) | {WAITING: big}
    assert evict([four_gb_node("node-1"), four_gb_node("node-2")], replicas, models, used) == (
        "node-1", ["r-phi", "r-llama"])


def test_a_judge_is_never_stopped_to_make_room() -> None:
    judge = qwen_guard_model(replicas=0)
    replicas = [running("r-judge", judge.name, memory_gb=4.0)]
    assert evict([four_gb_node()], replicas, catalog(judge)) is None


def test_a_replica_with_requests_in_flight_is_never_stopped() -> None:
    full = [running("r-llama", LLAMA), running("r-phi", PHI)]
    assert evict([four_gb_node()], full, used={"r-llama": (1, 0), "r-phi": (2, 0)}) is None


def test_a_models_min_replicas_are_never_stopped() -> None:
    always = {LLAMA: on_demand_model(LLAMA, min=1, max=2), PHI: on_demand_model(PHI, min=1, max=2)}
    full = [running("r-llama", LLAMA), running("r-phi", PHI)]
    assert evict([four_gb_node()], full, catalog() | always) is None


def test_above_min_only_the_least_recently_used_replicas_are_candidates() -> None:
    models = catalog() | {LLAMA: on_demand_model(LLAMA, min=1, max=3)}
    replicas = [running("r-a", LLAMA), running("r-b", LLAMA, node_id="node-2")]
    act = activity(replicas=use(**{"r-a": (0, ago(10)), "r-b": (0, ago(900))}))
    per_node = candidates(WAITING, models, replicas, act)
    assert {n: [r.id for r, _ in v] for n, v in per_node.items()} == {"node-2": ["r-b"]}


def test_a_replica_still_starting_or_of_a_model_with_a_queue_is_not_a_candidate() -> None:
    replicas = [replica_placed("r-starting", LLAMA, node_id="node-1", memory_gb=2.0),
                running("r-phi", PHI)]
    act = activity(queued={PHI: 2})
    assert candidates(WAITING, catalog(), replicas, act) == {}


def test_a_replica_already_stopping_is_not_stopped_again() -> None:
    stopping = running("r-llama", LLAMA).model_copy(update={"state": ReplicaState.STOPPING})
    assert candidates(WAITING, catalog(), [stopping, running("r-phi", PHI)], activity(),
                      taken={"r-phi"}) == {}


def test_a_cordoned_node_is_never_made_room_on() -> None:
    full = [running("r-llama", LLAMA), running("r-phi", PHI)]
    assert evict([four_gb_node(cordoned=True)], full) is None
