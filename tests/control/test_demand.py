"""Demand → how many replicas a model wants, with plain data and a fixed clock."""

from __future__ import annotations

from datetime import timedelta

from llmgw.control.demand import ago, state, want
from llmgw.core.types import ReplicaState
from tests.demand_factories import (
    NO_DEMAND,
    SETTINGS,
    activity,
    on_demand_model,
    queue_of,
    use,
)
from tests.demand_factories import ago as before
from tests.factories import NOW, gemma_model, remote_model, replica_pending, replica_placed, replica_ready

SECOND = timedelta(seconds=1)


# --- cold start --------------------------------------------------------------------------------


def test_a_queue_for_a_model_with_no_replica_wants_one_cold_start() -> None:
    w = want(on_demand_model(), [], queue_of("gemma3-270m"), NOW, SETTINGS)
    assert (w.replicas, w.cold, w.queued) == (1, True, 1)


def test_an_on_demand_model_nobody_asks_for_wants_nothing() -> None:
    w = want(on_demand_model(), [], NO_DEMAND, NOW, SETTINGS)
    assert (w.replicas, w.cold) == (0, False)


def test_a_model_scaled_to_max_zero_is_never_started_by_a_queue() -> None:
    w = want(on_demand_model(max=0), [], queue_of("gemma3-270m"), NOW, SETTINGS)
    assert w.replicas == 0


def test_no_second_replica_while_the_first_is_loading() -> None:
    loading = replica_placed("r1")  # STARTING
    w = want(on_demand_model(max=4), [loading], queue_of("gemma3-270m", waiting=30), NOW, SETTINGS)
    assert (w.replicas, w.cold) == (1, False)


def test_a_queued_model_whose_replica_pends_keeps_that_one_as_its_cold_start() -> None:
    waiting = replica_pending("r1", reason="does not fit")
    w = want(on_demand_model(max=4), [waiting], queue_of("gemma3-270m"), NOW, SETTINGS)
    assert (w.replicas, w.cold) == (1, True)


def test_a_pending_replica_nobody_waits_for_any_more_goes_so_the_next_request_tries_again() -> None:
    waiting = replica_pending("r1", reason="does not fit: needs 8 GB memory")
    assert want(on_demand_model(), [waiting], NO_DEMAND, NOW, SETTINGS).replicas == 0


def test_a_pending_replica_within_min_stays_whatever_the_demand() -> None:
    waiting = replica_pending("r1", reason="does not fit: needs 8 GB memory")
    assert want(gemma_model(), [waiting], NO_DEMAND, NOW, SETTINGS).replicas == 1


# --- autoscaling -------------------------------------------------------------------------------


def test_load_above_the_threshold_adds_a_replica_only_once_it_has_lasted() -> None:
    model = on_demand_model(max=3)
    ready = [replica_ready("r1")]
    busy = activity(queued={"gemma3-270m": 3}, replicas=use(r1=(2, NOW)))  # 5 per ready replica

    first = want(model, ready, busy, NOW, SETTINGS)
    assert first.replicas == 1 and first.busy_since == NOW

    almost = NOW + (SETTINGS.scale_up_after_s - 1) * SECOND
    not_yet = want(model, ready, busy, almost, SETTINGS, first.busy_since)
    assert not_yet.replicas == 1 and not_yet.busy_since == NOW

    later = want(model, ready, busy, NOW + SETTINGS.scale_up_after_s * SECOND, SETTINGS, first.busy_since)
    assert later.replicas == 2


def test_load_that_drops_below_the_threshold_resets_the_wait() -> None:
    model = on_demand_model(max=3)
    calm = activity(replicas=use(r1=(4, NOW)))  # exactly 4 per ready replica: not above
    w = want(model, [replica_ready("r1")], calm, NOW + 60 * SECOND, SETTINGS, busy_since=NOW)
    assert (w.replicas, w.busy_since) == (1, None)


def test_autoscaling_stops_at_max() -> None:
    model = on_demand_model(max=2)
    ready = [replica_ready("r1"), replica_ready("r2", node_id="other")]
    busy = activity(replicas=use(r1=(20, NOW), r2=(20, NOW)))
    assert want(model, ready, busy, NOW + 60 * SECOND, SETTINGS, busy_since=NOW).replicas == 2


def test_no_autoscaling_while_an_added_replica_is_still_starting() -> None:
    model = on_demand_model(max=3)
    mine = [replica_ready("r1"), replica_placed("r2")]
    busy = activity(replicas=use(r1=(20, NOW)))
    w = want(model, mine, busy, NOW + 60 * SECOND, SETTINGS, busy_since=NOW)
    assert (w.replicas, w.busy_since) == (2, None)


# --- idle stops --------------------------------------------------------------------------------


def test_the_least_recently_used_idle_replica_above_min_stops() -> None:
    model = on_demand_model(min=1, max=3, idle_s=60)
    mine = [replica_ready("r-old"), replica_ready("r-new", node_id="other"), replica_ready("r-busy")]
    used = activity(replicas=use(**{"r-old": (0, before(600)), "r-new": (0, before(120)),
                                   "r-busy": (0, before(10))}))

    w = want(model, mine, used, NOW, SETTINGS)

    # Two are idle past 60 s, but one of the three is kept for min 1 – and that is the busy one.
    assert w.replicas == 1
    assert [rid for rid, _ in w.idle] == ["r-old", "r-new"]
    assert "served nothing for 10m" in w.idle[0][1]


def test_a_failed_replica_idle_that_long_stops_but_a_starting_one_does_not() -> None:
    model = on_demand_model(max=2, idle_s=60)
    failed = replica_placed("r-failed", state=ReplicaState.FAILED, updated_at=before(600))
    loading = replica_placed("r-loading", node_id="other", updated_at=before(600))
    w = want(model, [failed, loading], NO_DEMAND, NOW, SETTINGS)
    assert [rid for rid, _ in w.idle] == ["r-failed"]


def test_a_replica_with_requests_in_flight_is_never_idle() -> None:
    model = on_demand_model(idle_s=60)
    w = want(model, [replica_ready("r1")], activity(replicas=use(r1=(1, before(3600)))), NOW, SETTINGS)
    assert (w.replicas, w.idle) == (1, ())


def test_a_replica_used_within_idle_s_stays() -> None:
    model = on_demand_model(idle_s=300)
    w = want(model, [replica_ready("r1")], activity(replicas=use(r1=(0, before(299)))), NOW, SETTINGS)
    assert w.idle == ()


def test_the_last_on_demand_replica_stops_once_idle() -> None:
    model = on_demand_model(idle_s=300)
    w = want(model, [replica_ready("r1")], activity(replicas=use(r1=(0, before(301)))), NOW, SETTINGS)
    assert w.replicas == 0 and [rid for rid, _ in w.idle] == ["r1"]


def test_min_replicas_never_stop_however_idle() -> None:
    model = on_demand_model(min=1, max=2, idle_s=60)
    w = want(model, [replica_ready("r1")], activity(replicas=use(r1=(0, before(86400)))), NOW, SETTINGS)
    assert (w.replicas, w.idle) == (1, ())


def test_a_judge_keeps_one_replica_however_idle() -> None:
    judge = on_demand_model("qwen3guard-0.6b", max=2, idle_s=60, guard=True)
    mine = [replica_ready("r1", "qwen3guard-0.6b"), replica_ready("r2", "qwen3guard-0.6b", node_id="n2")]
    used = activity(replicas=use(r1=(0, before(3600)), r2=(0, before(600))))
    w = want(judge, mine, used, NOW, SETTINGS)
    assert (w.replicas, [rid for rid, _ in w.idle]) == (1, ["r1"])


def test_without_idle_s_replicas_above_min_stay() -> None:
    model = on_demand_model(idle_s=None)
    w = want(model, [replica_ready("r1")], activity(replicas=use(r1=(0, before(86400)))), NOW, SETTINGS)
    assert (w.replicas, w.idle) == (1, ())


def test_a_replica_no_server_has_used_is_idle_since_it_became_ready() -> None:
    model = on_demand_model(idle_s=60)
    fresh = replica_ready("r1", updated_at=before(30))
    stale = replica_ready("r2", node_id="other", updated_at=before(90))
    w = want(model.model_copy(update={"scaling": model.scaling.model_copy(update={"max": 2})}),
             [fresh, stale], NO_DEMAND, NOW, SETTINGS)
    assert [rid for rid, _ in w.idle] == ["r2"]


def test_nothing_is_idle_while_requests_for_the_model_wait() -> None:
    model = on_demand_model(idle_s=60)
    w = want(model, [replica_ready("r1", updated_at=before(600))], queue_of("gemma3-270m"), NOW, SETTINGS)
    assert w.idle == ()


# --- the state `ctl model list` shows ----------------------------------------------------------


def test_state_of_a_model_with_no_replica_is_cold() -> None:
    assert state(on_demand_model(), [], NO_DEMAND, NOW) == "cold"


def test_state_while_a_replica_starts_names_its_node() -> None:
    assert state(on_demand_model(), [replica_placed("r1", node_id="node-2")], NO_DEMAND, NOW) == (
        "loading on node-2")


def test_state_of_a_ready_model_in_use_is_ready() -> None:
    used = activity(replicas=use(r1=(0, before(5))))
    assert state(on_demand_model(), [replica_ready("r1")], used, NOW) == "ready"


def test_state_of_a_ready_model_nobody_used_for_minutes_is_idle_that_long() -> None:
    used = activity(replicas=use(r1=(0, before(190))))
    assert state(on_demand_model(), [replica_ready("r1")], used, NOW) == "idle 3m"


def test_state_of_a_pending_failed_or_remote_model() -> None:
    assert state(gemma_model(), [replica_pending("r1")], NO_DEMAND, NOW) == "pending"
    failed = replica_placed("r1", state=ReplicaState.FAILED)
    assert state(gemma_model(), [failed], NO_DEMAND, NOW) == "failed"
    assert state(remote_model(), [], NO_DEMAND, NOW) == "remote"


SIGILL = ("llama-server stopped with an illegal instruction (SIGILL): this build uses CPU "
          "instructions this machine cannot run\nengine log: /d/logs/r1.log")


def test_a_crash_loop_is_failing_with_what_the_engine_died_of_not_loading() -> None:
    # Between two starts the replica is failed; during a restart it is starting but says so.
    failed = replica_placed("r1", state=ReplicaState.FAILED, last_error=SIGILL)
    restarting = replica_placed("r1", state=ReplicaState.STARTING,
                                last_error=f"restarting after 2 failed start(s) in a row: {SIGILL}")
    want = "failing: llama-server stopped with an illegal instruction (SIGILL)"
    assert state(gemma_model(), [failed], NO_DEMAND, NOW) == want
    assert state(gemma_model(), [restarting], NO_DEMAND, NOW) == want
    # A first start is loading, whatever a sibling died of.
    fresh = replica_placed("r2", state=ReplicaState.STARTING)
    assert state(gemma_model(), [failed, fresh], NO_DEMAND, NOW).startswith("loading on")


def test_a_crash_loop_given_up_on_is_failed_with_the_reason() -> None:
    gave_up = replica_placed("r1", state=ReplicaState.FAILED, last_error=(
        f"gave up after 5 failed starts in a row (it starts again when its model or profile "
        f"changes, or llmgw restarts): {SIGILL}"))
    assert state(gemma_model(), [gave_up], NO_DEMAND, NOW) == (
        "failed: llama-server stopped with an illegal instruction (SIGILL)")


def test_durations_read_like_a_table() -> None:
    assert [ago(s) for s in (45, 180, 7200, 3 * 86400)] == ["45s", "3m", "2h", "3d"]

