"""The replica keeper: `plan` with plain data, and `ReplicaKeeper` with in-memory read/apply."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

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
from llmgw.core.errors import StoreUnavailable
from llmgw.core.types import Model, Node, Replica, ReplicaState
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
    silent_node,
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


def test_scale_down_stops_pending_replicas_first() -> None:
    model = gemma_model(replicas=2)
    replicas = [replica_ready("r-ready"), replica_failed("r-failed"), replica_pending("r-pending")]

    actions = plan([model], [node_8_cores()], replicas, NOW)

    assert actions == [Stop("r-pending", "gemma3-270m is scaled to 2")]


def test_scale_down_stops_failed_replicas_before_working_ones() -> None:
    model = gemma_model(replicas=1)
    replicas = [replica_ready("r-a"), replica_failed("r-b"), replica_ready("r-c"), replica_pending("r-d")]

    actions = plan([model], [node_8_cores()], replicas, NOW)

    stopped = [a.replica_id for a in actions if isinstance(a, Stop)]
    assert len(actions) == len(stopped) == 3
    assert stopped[:2] == ["r-d", "r-b"]
    assert stopped[2] in {"r-a", "r-c"}


def test_scaling_to_zero_stops_every_replica() -> None:
    model = gemma_model(replicas=0)
    actions = plan([model], [node_8_cores()], [replica_ready("r1"), replica_pending("r2")], NOW)
    assert {a.replica_id for a in actions if isinstance(a, Stop)} == {"r1", "r2"}
    assert len(actions) == 2


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
    assert place == Place("gemma3-270m", "gpu", "gpu", cpu_cores=1, memory_gb=1.0, gpu_class="a100", gpus=1)


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


def test_a_new_leader_gives_nodes_a_full_timeout_from_its_election() -> None:
    # The database was down for 47 s: no node could report, yet none is gone.
    replicas = [replica_ready("r1", node_id="silent")]
    nodes = [silent_node()]
    elected = NOW - timedelta(seconds=1)

    assert plan([gemma_model()], nodes, replicas, NOW, leading_since=elected) == []
    # A node that really is gone is lost a timeout after the election.
    later = elected + timedelta(seconds=31)
    assert plan([gemma_model()], nodes, replicas, later, leading_since=elected)[0] == \
        Forget("r1", "node silent is lost (no heartbeat for 31s)")
