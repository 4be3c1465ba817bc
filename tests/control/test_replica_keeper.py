"""The replica keeper: `plan` with plain data, and `ReplicaKeeper` with in-memory read/apply."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import pytest

from llmgw.control.replica_keeper import (
    NODE_TIMEOUT,
    Action,
    Forget,
    Pend,
    Place,
    ReplicaKeeper,
    Stop,
    new_replica,
    plan,
)
from llmgw.core.clock import FakeClock
from llmgw.core.demand import REPORT_S, Activity
from llmgw.core.errors import StoreUnavailable
from llmgw.core.types import Model, Node, Replica, ReplicaState, Scaling
from llmgw.gateway.upstream.table import nowhere_reason
from tests.demand_factories import (
    NO_DEMAND,
    SETTINGS,
    activity,
    ago,
    four_gb_node,
    on_demand_model,
    queue_of,
    running,
    use,
)
from tests.factories import (
    NOW,
    cpu_profile,
    gemma_model,
    gpu_node,
    gpu_profile,
    judge_machine,
    judge_profile,
    local_model,
    node_2_cores,
    node_8_cores,
    qwen_guard_model,
    remote_model,
    replica_failed,
    replica_pending,
    replica_placed,
    replica_ready,
    tiny_node,
)


def apply(replicas: list[Replica], actions: list[Action]) -> list[Replica]:
    """What the store does with the keeper's actions, in memory."""
    rows = {r.id: r for r in replicas}
    for action in actions:
        match action:
            case Place(replica_id=None) | Pend(replica_id=None):
                row = new_replica(action)
                rows[row.id] = row
            case Place(replica_id=rid) if rid is not None:
                rows[rid] = rows[rid].model_copy(
                    update={
                        "node_id": action.node_id,
                        "profile": action.profile,
                        "state": ReplicaState.STARTING,
                        "cpu_cores": action.cpu_cores,
                        "memory_gb": action.memory_gb,
                        "last_error": None,
                    }
                )
            case Pend(replica_id=rid) if rid is not None:
                rows[rid] = rows[rid].model_copy(update={"last_error": action.reason})
            case Stop(replica_id=rid):
                rows[rid] = rows[rid].model_copy(update={"state": ReplicaState.STOPPING})
            case Forget(replica_id=rid):
                del rows[rid]
    return list(rows.values())


def converge(
    models: list[Model], nodes: list[Node], replicas: list[Replica], now: datetime = NOW
) -> list[Replica]:
    """Plan and apply once, then check the keeper has nothing more to say."""
    after = apply(replicas, plan(models, nodes, replicas, now))
    assert plan(models, nodes, after, now) == []
    return after


# --- placing -----------------------------------------------------------------------------------


def test_places_scaling_min_replicas_of_a_local_model_on_a_node_that_fits() -> None:
    model = gemma_model(replicas=2, profiles=[cpu_profile(cores=2, memory_gb=2.0)])

    actions = plan([model], [node_8_cores()], [], NOW)

    assert actions == [
        Place("gemma3-270m", "big", "default", cpu_cores=2, memory_gb=2.0),
        Place("gemma3-270m", "big", "default", cpu_cores=2, memory_gb=2.0),
    ]


def test_a_model_already_at_scale_needs_nothing() -> None:
    model = gemma_model(replicas=1)
    assert plan([model], [node_8_cores()], [replica_ready("r1")], NOW) == []


def test_replicas_spread_over_nodes() -> None:
    model = gemma_model(replicas=2)
    actions = plan([model], [node_8_cores("a"), node_8_cores("b")], [], NOW)
    assert sorted(a.node_id for a in actions if isinstance(a, Place)) == ["a", "b"]


def test_a_profile_that_fits_nowhere_pends_with_a_reason_naming_cores() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=4)])

    actions = plan([model], [node_2_cores()], [], NOW)

    assert len(actions) == 1
    pend = actions[0]
    assert isinstance(pend, Pend)
    assert pend.model == "gemma3-270m"
    assert pend.replica_id is None
    assert "needs 4 cores" in pend.reason
    assert "node small has only 2" in pend.reason


def test_a_profile_that_fits_nowhere_pends_with_a_reason_naming_memory() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=64.0)])
    [pend] = plan([model], [node_2_cores(), node_8_cores()], [], NOW)
    assert isinstance(pend, Pend)
    assert "needs 64 GB memory" in pend.reason
    # Every node says why, so the operator sees the whole picture.
    assert "node small has only 8 GB" in pend.reason
    assert "node big has only 32 GB" in pend.reason


def test_the_second_profile_is_used_when_the_first_does_not_fit() -> None:
    model = gemma_model(
        profiles=[cpu_profile("fast", cores=4, memory_gb=4.0), cpu_profile("lean", cores=1, memory_gb=2.0)]
    )

    actions = plan([model], [node_2_cores()], [], NOW)

    assert actions == [Place("gemma3-270m", "small", "lean", cpu_cores=1, memory_gb=2.0)]


def test_the_reason_names_every_profile_that_was_tried() -> None:
    model = gemma_model(profiles=[cpu_profile("fast", cores=16), gpu_profile("gpu", gpu=1)])
    [pend] = plan([model], [node_2_cores()], [], NOW)
    assert isinstance(pend, Pend)
    assert "profile fast: needs 16 cores" in pend.reason
    assert "profile gpu: needs 1 GPU(s) of class l4" in pend.reason


def test_a_pending_replica_that_now_fits_is_placed_under_its_own_id() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=4)])
    waiting = replica_pending("rep-w", reason="does not fit: profile default: needs 4 cores; ...")

    actions = plan([model], [node_8_cores()], [waiting], NOW)

    assert actions == [Place("gemma3-270m", "big", "default", cpu_cores=4, memory_gb=1.0, replica_id="rep-w")]


def test_a_pending_replica_whose_reason_changed_is_pended_again_under_its_own_id() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=4)])
    waiting = replica_pending("rep-w", reason="no node is available")

    [pend] = plan([model], [node_2_cores()], [waiting], NOW)

    assert isinstance(pend, Pend)
    assert pend.replica_id == "rep-w"
    assert "needs 4 cores" in pend.reason


def test_a_pending_replica_whose_reason_has_not_changed_needs_nothing() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=4)])
    [first] = plan([model], [node_2_cores()], [], NOW)
    assert isinstance(first, Pend)
    waiting = replica_pending("rep-w", reason=first.reason)

    assert plan([model], [node_2_cores()], [waiting], NOW) == []


# --- scaling down and stopping -----------------------------------------------------------------


def test_scale_down_drops_pending_replicas_first() -> None:
    model = gemma_model(replicas=2)
    replicas = [replica_ready("r-ready"), replica_failed("r-failed"), replica_pending("r-pending")]

    actions = plan([model], [node_8_cores()], replicas, NOW)

    # A pending replica has no engine and no agent: its row goes at once, not "stopping" forever.
    assert actions == [Forget("r-pending", "gemma3-270m is scaled to 2")]


def test_a_never_placed_replica_left_stopping_is_cleaned_up() -> None:
    left = replica_pending("r-old").model_copy(update={"state": ReplicaState.STOPPING})
    assert plan([gemma_model(replicas=0)], [node_8_cores()], [left], NOW) == [
        Forget("r-old", "it was never placed")
    ]


def test_scale_down_stops_failed_replicas_before_working_ones() -> None:
    model = gemma_model(replicas=1)
    replicas = [replica_ready("r-a"), replica_failed("r-b"), replica_ready("r-c"), replica_pending("r-d")]

    actions = plan([model], [node_8_cores()], replicas, NOW)

    assert actions[0] == Forget("r-d", "gemma3-270m is scaled to 1")
    stopped = [a.replica_id for a in actions if isinstance(a, Stop)]
    assert len(actions) == 3 and len(stopped) == 2
    assert stopped[0] == "r-b"
    assert stopped[1] in {"r-a", "r-c"}


def test_scaling_to_zero_stops_every_replica() -> None:
    model = gemma_model(replicas=0)
    actions = plan([model], [node_8_cores()], [replica_ready("r1"), replica_pending("r2")], NOW)
    assert sorted(actions, key=lambda a: a.replica_id) == [
        Stop("r1", "gemma3-270m is scaled to 0"), Forget("r2", "gemma3-270m is scaled to 0")]


def test_replicas_of_a_model_no_longer_in_the_catalog_are_stopped() -> None:
    gone = replica_ready("r-old", model="llama-3-8b")

    actions = plan([gemma_model(replicas=0)], [node_8_cores()], [gone], NOW)

    assert actions == [Stop("r-old", "model llama-3-8b is no longer in the catalog")]


def test_a_replica_already_stopping_is_not_stopped_again() -> None:
    stopping = replica_placed("r-old", model="llama-3-8b", state=ReplicaState.STOPPING)
    assert plan([], [node_8_cores()], [stopping], NOW) == []


# --- remote models -----------------------------------------------------------------------------


def test_remote_models_get_no_replicas() -> None:
    assert plan([remote_model()], [node_8_cores()], [], NOW) == []


def test_a_replica_of_a_remote_model_is_stopped() -> None:
    stray = replica_ready("r-stray", model="gpt-4o-mini")
    actions = plan([remote_model("gpt-4o-mini")], [node_8_cores()], [stray], NOW)
    assert [a.replica_id for a in actions if isinstance(a, Stop)] == ["r-stray"]
    assert len(actions) == 1


# --- the scheduler's choices -------------------------------------------------------------------


def test_a_node_with_too_little_memory_is_never_chosen() -> None:
    model = gemma_model(replicas=3, profiles=[cpu_profile(cores=1, memory_gb=4.0)])
    actions = plan([model], [tiny_node(), node_8_cores()], [], NOW)
    assert [a.node_id for a in actions if isinstance(a, Place)] == ["big", "big", "big"]


def test_a_judge_goes_only_to_a_node_with_its_label() -> None:
    guard = qwen_guard_model(replicas=2, profiles=[judge_profile()])
    nodes = [node_8_cores(), judge_machine("j1"), judge_machine("j2")]
    actions = plan([guard], nodes, [], NOW)
    assert sorted(a.node_id for a in actions if isinstance(a, Place)) == ["j1", "j2"]


def test_a_gpu_placement_records_the_gpu_class_it_takes() -> None:
    model = gemma_model(profiles=[gpu_profile(gpu=1, gpu_class=None)])
    [place] = plan([model], [gpu_node(gpus={"a100": 1})], [], NOW)
    assert place == Place("gemma3-270m", "gpu", "gpu", cpu_cores=1, memory_gb=1.0, gpu_class="a100", gpus=1,
                         devices=("a100-0",))


# --- resources already held --------------------------------------------------------------------


def test_two_models_competing_for_one_two_core_node() -> None:
    both_cores = [cpu_profile(cores=2, memory_gb=2.0)]
    gemma = gemma_model(profiles=both_cores)
    guard = qwen_guard_model(profiles=both_cores)

    actions = plan([gemma, guard], [node_2_cores()], [], NOW)

    assert len(actions) == 2
    placed, pended = actions
    assert placed == Place("gemma3-270m", "small", "default", cpu_cores=2, memory_gb=2.0)
    assert isinstance(pended, Pend)
    assert pended.model == "qwen3guard-0.6b"
    assert "node small has 0 of 2 free" in pended.reason


def test_replicas_already_on_the_node_leave_less_room() -> None:
    guard = qwen_guard_model(profiles=[cpu_profile(cores=1)])
    gemma = gemma_model(profiles=[cpu_profile(cores=2)])
    running = replica_ready("r-gemma", node_id="small", cores=2, memory_gb=1.0)

    [pend] = plan([gemma, guard], [node_2_cores()], [running], NOW)

    assert isinstance(pend, Pend)
    assert pend.model == "qwen3guard-0.6b"
    assert "needs 1 cores; node small has 0 of 2 free" in pend.reason


def test_a_stopping_replica_frees_its_cores_for_others() -> None:
    guard = qwen_guard_model(profiles=[cpu_profile(cores=2)])
    leaving = replica_placed(
        "r-old", model="llama-3-8b", node_id="small", cores=2, state=ReplicaState.STOPPING
    )

    actions = plan([guard], [node_2_cores()], [leaving], NOW)

    assert actions == [Place("qwen3guard-0.6b", "small", "default", cpu_cores=2, memory_gb=1.0)]


def test_one_gpu_is_not_given_to_two_replicas() -> None:
    # Two engines on one GPU run out of VRAM; the second must wait like it would for cores.
    one_l4 = gpu_node("gpu", gpus={"l4": 1})
    gemma = gemma_model(profiles=[gpu_profile(gpu=1, gpu_class="l4")])
    guard = qwen_guard_model(profiles=[gpu_profile(gpu=1, gpu_class="l4")])

    actions = plan([gemma, guard], [one_l4], [], NOW)

    assert [type(a) for a in actions] == [Place, Pend], actions


# --- idempotence -------------------------------------------------------------------------------


def test_planning_again_on_the_applied_result_changes_nothing() -> None:
    models = [
        gemma_model(replicas=2),  # fits
        qwen_guard_model(profiles=[cpu_profile(cores=64)]),  # fits nowhere
        local_model("phi-4", replicas=1),  # over scale
        remote_model(),
    ]
    nodes = [node_2_cores(), node_8_cores()]
    replicas = [
        replica_ready("r-phi-1", model="phi-4"),
        replica_ready("r-phi-2", model="phi-4", node_id="small"),
        replica_ready("r-orphan", model="mistral-7b"),
    ]

    after = converge(models, nodes, replicas)

    live = [r for r in after if r.state != ReplicaState.STOPPING]
    assert sorted(r.model for r in live) == ["gemma3-270m", "gemma3-270m", "phi-4", "qwen3guard-0.6b"]
    [waiting] = [r for r in live if r.model == "qwen3guard-0.6b"]
    assert waiting.node_id is None and waiting.last_error and "needs 64 cores" in waiting.last_error


def test_a_pending_replica_converges_once_a_node_appears() -> None:
    models = [gemma_model()]
    waiting = converge(models, [], [])
    [pending] = waiting
    assert pending.state == ReplicaState.PENDING and pending.node_id is None

    [placed] = converge(models, [node_2_cores()], waiting)

    assert placed.id == pending.id
    assert (placed.node_id, placed.state) == ("small", ReplicaState.STARTING)


# --- the loop ----------------------------------------------------------------------------------


class InMemoryStore:
    """The keeper's read and apply, over lists."""

    def __init__(self, models: list[Model], nodes: list[Node], replicas: list[Replica]) -> None:
        self.models, self.nodes, self.replicas = models, nodes, replicas
        self.applied: list[Action] = []
        self.reads = 0

    async def read(self) -> tuple[list[Model], list[Node], list[Replica]]:
        self.reads += 1
        return self.models, self.nodes, self.replicas

    async def apply(self, action: Action) -> None:
        self.applied.append(action)
        self.replicas = apply(self.replicas, [action])


async def test_tick_applies_the_plan_and_announces_the_change_once() -> None:
    store = InMemoryStore([gemma_model(replicas=2)], [node_8_cores()], [replica_ready("r-orphan", "old")])
    changes: list[None] = []
    keeper = ReplicaKeeper(store.read, store.apply, FakeClock(NOW), on_change=lambda: changes.append(None))

    did = await keeper.tick()

    assert did == store.applied
    assert len(did) == 3
    assert sorted(r.model for r in store.replicas if r.state == ReplicaState.STARTING) == [
        "gemma3-270m",
        "gemma3-270m",
    ]
    assert len(changes) == 1

    assert await keeper.tick() == []
    assert len(changes) == 1  # nothing changed, nobody is woken


async def test_tick_uses_the_keepers_clock_for_node_liveness() -> None:
    clock = FakeClock(NOW)
    store = InMemoryStore([gemma_model()], [node_8_cores(heartbeat_at=clock.now())], [])
    keeper = ReplicaKeeper(store.read, store.apply, clock)
    clock.advance(NODE_TIMEOUT.total_seconds() + 1)

    [action] = await keeper.tick()

    assert isinstance(action, Pend)


async def test_a_keeper_that_stalled_gives_nodes_a_full_timeout_from_its_next_look() -> None:
    # The keeper's machine was paused for 40 s: the node could not report in that time
    # either, so its replica is kept; a node still silent a timeout later is lost.
    clock = FakeClock(NOW)
    node = node_8_cores(heartbeat_at=clock.now())
    store = InMemoryStore([gemma_model()], [node], [replica_ready("r1", node_id=node.id)])
    keeper = ReplicaKeeper(store.read, store.apply, clock)
    assert await keeper.tick() == []

    clock.advance(40)
    assert await keeper.tick() == []
    for _ in range(6):  # passes every 5 s, the node silent throughout
        clock.advance(5)
        assert await keeper.tick() == []
    clock.advance(5)

    assert Forget("r1", "node big is lost (no heartbeat for 75s)") in await keeper.tick()


async def test_the_loop_survives_a_store_outage() -> None:
    store = InMemoryStore([gemma_model()], [node_8_cores()], [])
    healthy_read = store.read
    placed = asyncio.Event()

    async def flaky_read() -> tuple[list[Model], list[Node], list[Replica]]:
        if store.reads == 0:
            store.reads += 1
            raise StoreUnavailable("database is down")
        return await healthy_read()

    async def apply_and_signal(action: Action) -> None:
        await store.apply(action)
        placed.set()

    keeper = ReplicaKeeper(flaky_read, apply_and_signal, FakeClock(NOW))
    task = asyncio.create_task(keeper.run(interval_s=3600))
    try:
        keeper.wake.set()  # the next pass starts without waiting out the interval
        await asyncio.wait_for(placed.wait(), timeout=5)
    finally:
        task.cancel()
        await asyncio.wait({task})

    assert store.reads == 2
    assert [type(a) for a in store.applied] == [Place]


# --- on demand ---------------------------------------------------------------------------------


def test_a_queue_for_a_cold_model_places_a_replica_at_once_marked_as_a_cold_start() -> None:
    [place] = plan([on_demand_model()], [four_gb_node()], [], NOW, activity=queue_of("gemma3-270m"))
    assert place == Place("gemma3-270m", "node-1", "default", cpu_cores=1, memory_gb=2.0, cold=True)


def test_a_cold_model_with_nobody_waiting_stays_cold() -> None:
    assert plan([on_demand_model()], [four_gb_node()], [], NOW, activity=NO_DEMAND) == []


def test_a_queue_does_not_place_a_second_replica_while_the_first_loads() -> None:
    loading = replica_placed("r1", node_id="node-1")
    waiting = queue_of("gemma3-270m", waiting=40)
    assert plan([on_demand_model(max=4)], [four_gb_node()], [loading], NOW, activity=waiting) == []


def test_an_idle_on_demand_replica_is_stopped_saying_why() -> None:
    used = activity(replicas=use(r1=(0, ago(600))))
    [stop] = plan([on_demand_model(idle_s=300)], [four_gb_node()], [running("r1", "gemma3-270m")], NOW,
                  activity=used)
    assert isinstance(stop, Stop) and stop.replica_id == "r1" and stop.room_for is None
    assert "served nothing for 10m" in stop.reason


def test_without_demand_the_keeper_keeps_exactly_min_as_before() -> None:
    # Callers that pass no activity get the old keeper: replicas above min go.
    model = on_demand_model(min=1, max=3)
    replicas = [running("r1", "gemma3-270m"), running("r2", "gemma3-270m", node_id="node-2")]
    actions = plan([model], [four_gb_node(), four_gb_node("node-2")], replicas, NOW)
    assert [type(a) for a in actions] == [Stop]


def test_with_no_demand_always_on_models_plan_as_without_it() -> None:
    models = [gemma_model(replicas=2), qwen_guard_model(profiles=[cpu_profile(cores=64)]),
              local_model("phi-4", replicas=1), remote_model()]
    nodes = [node_2_cores(), node_8_cores()]
    replicas = [replica_ready("r-phi-1", model="phi-4"), replica_pending("r-gemma")]
    assert plan(models, nodes, replicas, NOW, activity=NO_DEMAND) == plan(models, nodes, replicas, NOW)


def test_a_waiting_model_that_fits_nowhere_stops_an_idle_one_on_that_node_and_takes_its_place() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4", idle_s=3600)]
    idle_phi = running("r-phi", "phi-4")
    demand = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (0, ago(30))}))

    actions = plan(models, [four_gb_node()], [idle_phi], NOW, activity=demand)

    assert actions == [
        Stop("r-phi", "stopped to make room for gemma3-270m (idle since 23:59:30)",
             room_for="gemma3-270m", model="phi-4", node_id="node-1"),
        Place("gemma3-270m", "node-1", "default", cpu_cores=1, memory_gb=4.0, cold=True),
    ]
    # Applied, the plan is settled: the stopped replica is not stopped again, nothing more moves.
    after = apply([idle_phi], actions)
    assert plan(models, [four_gb_node()], after, NOW, activity=demand) == []


def test_a_replica_idle_long_enough_to_stop_anyway_is_stopped_once_to_make_room() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4", idle_s=10)]
    demand = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (0, ago(30))}))

    actions = plan(models, [four_gb_node()], [running("r-phi", "phi-4")], NOW, activity=demand)

    assert [(type(a), a.room_for if isinstance(a, Stop) else a.model) for a in actions] == [
        (Stop, "gemma3-270m"), (Place, "gemma3-270m")]


def test_a_model_that_fits_nowhere_even_after_eviction_pends_with_the_schedulers_reasons() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=64.0), on_demand_model("phi-4")]
    demand = activity(queued={"gemma3-270m": 1})

    [pend] = plan(models, [four_gb_node()], [running("r-phi", "phi-4")], NOW, activity=demand)

    assert isinstance(pend, Pend)
    assert "needs 64 GB memory; node node-1 has only 4 GB" in pend.reason
    # Its waiters got that answer at once; with nobody waiting the pending row goes, so the next
    # request queues and the keeper tries again.
    after = apply([running("r-phi", "phi-4")], [pend])
    [forget] = plan(models, [four_gb_node()], after, NOW, activity=NO_DEMAND)
    assert isinstance(forget, Forget) and forget.replica_id != "r-phi"


def test_a_busy_replica_of_another_model_is_not_stopped_so_the_waiting_one_waits_for_room() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4")]
    demand = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (3, NOW)}))

    [pend] = plan(models, [four_gb_node()], [running("r-phi", "phi-4")], NOW, activity=demand)

    # Not "fits nowhere": its requests keep waiting, and phi-4 makes room once it is idle.
    assert isinstance(pend, Pend)
    assert pend.reason == "waiting for room on node-1: phi-4 is busy; stopped to make room once idle"
    assert nowhere_reason([replica_pending(model="gemma3-270m", reason=pend.reason)]) == ""

    idle = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (0, NOW)}))
    waiting = replica_pending(model="gemma3-270m", reason=pend.reason)
    stop, place = plan(models, [four_gb_node()], [running("r-phi", "phi-4"), waiting], NOW,
                       activity=idle)
    assert isinstance(stop, Stop) and stop.room_for == "gemma3-270m"
    assert isinstance(place, Place) and place.replica_id == waiting.id


def test_a_model_too_big_for_any_node_even_empty_fits_nowhere_at_once() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=64.0), on_demand_model("phi-4")]
    demand = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (3, NOW)}))

    [pend] = plan(models, [four_gb_node()], [running("r-phi", "phi-4")], NOW, activity=demand)

    assert isinstance(pend, Pend) and not pend.reason.startswith("waiting for room")
    assert nowhere_reason([replica_pending(model="gemma3-270m", reason=pend.reason)]) != ""


def test_a_model_waiting_for_room_behind_busy_replicas_is_looked_at_again_within_a_report() -> None:
    # The replica it waits behind may have finished its last request already: its server says so
    # at its next activity write, within REPORT_S, not within the keeper's interval.
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4")]
    busy = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (1, NOW)}))
    phi = running("r-phi", "phi-4")

    pend = plan(models, [four_gb_node()], [phi], NOW, activity=busy)
    assert pend.look_again_s == REPORT_S < SETTINGS.keeper_interval_s

    # Still busy on the next pass: nothing to write, and still a look within a report.
    after = apply([phi], pend)
    again = plan(models, [four_gb_node()], after, NOW, activity=busy)
    assert again == [] and again.look_again_s == REPORT_S

    # Idle now: the swap happens, and the keeper is back to its interval.
    idle = activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (0, NOW)}))
    swap = plan(models, [four_gb_node()], after, NOW, activity=idle)
    assert [type(a) for a in swap] == [Stop, Place] and swap.look_again_s is None


def test_the_keeper_looks_again_at_its_interval_when_nothing_waits_behind_busy_replicas() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4")]
    phi = running("r-phi", "phi-4")
    busy_phi = use(**{"r-phi": (1, NOW)})
    too_big = [on_demand_model("gemma3-270m", memory_gb=64.0), on_demand_model("phi-4")]

    cases = {
        "nothing waits": plan(models, [four_gb_node()], [phi], NOW,
                              activity=activity(replicas=busy_phi)),
        "a cold start that fits": plan(models, [four_gb_node()], [], NOW,
                                       activity=queue_of("gemma3-270m")),
        "fits nowhere even once idle": plan(too_big, [four_gb_node()], [phi], NOW,
                                            activity=activity(queued={"gemma3-270m": 1},
                                                              replicas=busy_phi)),
        "no demand read": plan(models, [four_gb_node()], [phi], NOW),
    }
    assert {name: p.look_again_s for name, p in cases.items()} == dict.fromkeys(cases)


async def test_the_keepers_next_look_follows_its_last_plan() -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4")]
    store = InMemoryStore(models, [four_gb_node()], [running("r-phi", "phi-4")])
    in_flight = 1

    async def read_activity() -> Activity:
        return activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (in_flight, NOW)}))

    keeper = ReplicaKeeper(store.read, store.apply, FakeClock(NOW), read_activity=read_activity)
    assert keeper.next_look(5.0) == 5.0  # no plan yet

    [pend] = await keeper.tick()
    assert isinstance(pend, Pend)
    assert keeper.next_look(5.0) == REPORT_S
    assert keeper.next_look(0.2) == 0.2  # never later than the interval

    in_flight = 0
    assert [type(a) for a in await keeper.tick()] == [Stop, Place]
    assert keeper.next_look(5.0) == 5.0


async def test_the_keeper_autoscales_after_load_lasts_and_reports_each_action() -> None:
    clock = FakeClock(NOW)
    store = InMemoryStore([on_demand_model(max=2)], [four_gb_node(), four_gb_node("node-2")],
                          [running("r1", "gemma3-270m")])
    busy = activity(queued={"gemma3-270m": 9}, replicas=use(r1=(4, NOW)))
    seen: list[Action] = []

    async def read_activity() -> Activity:
        return busy

    keeper = ReplicaKeeper(store.read, store.apply, clock, read_activity=read_activity,
                           settings=SETTINGS, observe=seen.append)

    assert await keeper.tick() == []  # the load has only just risen
    clock.advance(SETTINGS.scale_up_after_s)
    [place] = await keeper.tick()

    assert isinstance(place, Place) and place.node_id == "node-2" and not place.cold
    assert seen == [place]


async def test_the_keeper_logs_an_eviction_naming_the_replica_its_model_and_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    models = [on_demand_model("gemma3-270m", memory_gb=4.0), on_demand_model("phi-4")]
    store = InMemoryStore(models, [four_gb_node()], [running("r-phi", "phi-4")])

    async def read_activity() -> Activity:
        return activity(queued={"gemma3-270m": 1}, replicas=use(**{"r-phi": (0, ago(30))}))

    keeper = ReplicaKeeper(store.read, store.apply, FakeClock(NOW), read_activity=read_activity)
    with caplog.at_level(logging.INFO, logger="llmgw.control.replica_keeper"):
        await keeper.tick()

    assert ("stopped r-phi of phi-4 on node-1 to make room for gemma3-270m (idle since 23:59:30)"
            in caplog.text)
    assert "place gemma3-270m on node-1 with profile default (cold start)" in caplog.text


# --- judges scaled by the judge keeper ---------------------------------------------------------


def scalable_judge() -> Model:
    """A judge the keeper serves: floor 2, up to 4 replicas."""
    return qwen_guard_model(replicas=2).model_copy(update={"scaling": Scaling(min=2, max=4)})


def test_the_judge_keepers_count_adds_a_judge_replica_where_it_fits() -> None:
    judge = scalable_judge()
    have = [replica_ready(f"rep-{i}", judge.name, port=39001 + i) for i in range(2)]
    actions = plan([judge], [node_8_cores()], have, NOW, judge_targets={judge.name: 3})
    assert actions == [Place(judge.name, "big", "default", cpu_cores=1, memory_gb=1.0)]


def test_the_judge_keepers_count_removes_a_judge_replica_and_stays_within_min_and_max() -> None:
    judge = scalable_judge()
    have = [replica_ready(f"rep-{i}", judge.name, port=39001 + i) for i in range(3)]
    [stop] = plan([judge], [node_8_cores()], have, NOW, judge_targets={judge.name: 2})
    assert isinstance(stop, Stop) and "scaled to 2" in stop.reason
    # Below the floor or above max: held to them.
    assert plan([judge], [node_8_cores()], have[:2], NOW, judge_targets={judge.name: 0}) == []
    four = [*have, replica_ready("rep-3", judge.name, port=39004)]
    assert plan([judge], [node_8_cores()], four, NOW, judge_targets={judge.name: 9}) == []


def test_a_judge_count_for_a_model_that_is_no_judge_is_ignored() -> None:
    model = gemma_model().model_copy(update={"scaling": Scaling(min=1, max=4)})
    have = [replica_ready("rep-0")]
    assert plan([model], [node_8_cores()], have, NOW, judge_targets={model.name: 4}) == []
