"""Whether a profile fits on a node: `free_on`, `misfit`, and the reasons the scheduler uses."""

from __future__ import annotations

from datetime import timedelta

from llmgw.control.placement import NODE_TIMEOUT, Free, Why, free_on, lacks, lost, misfit, short
from llmgw.core.types import Node, ReplicaState
from tests.factories import (
    NOW,
    cpu_profile,
    gpu_node,
    gpu_profile,
    node,
    node_2_cores,
    node_8_cores,
    replica_placed,
    silent_node,
)


def all_free(n: Node) -> Free:
    return Free(cores=n.cores, memory_gb=n.memory_gb, gpus=dict(n.gpus))


# --- free_on -----------------------------------------------------------------------------------


def test_an_empty_node_has_all_its_capacity_free() -> None:
    big = node_8_cores()
    assert free_on(big, []) == Free(cores=8, memory_gb=32.0)


def test_replicas_on_the_node_hold_their_cores_and_memory() -> None:
    big = node_8_cores()
    held = [
        replica_placed("r1", node_id="big", cores=2, memory_gb=4.0),
        replica_placed("r2", node_id="big", cores=3, memory_gb=1.5, state=ReplicaState.READY),
    ]
    assert free_on(big, held) == Free(cores=3, memory_gb=26.5)


def test_failed_replicas_still_hold_their_share_because_they_will_be_restarted() -> None:
    big = node_8_cores()
    failed = replica_placed("r1", node_id="big", cores=4, memory_gb=8.0, state=ReplicaState.FAILED)
    assert free_on(big, [failed]) == Free(cores=4, memory_gb=24.0)


def test_stopping_replicas_and_replicas_on_other_nodes_hold_nothing_here() -> None:
    big = node_8_cores()
    others = [
        replica_placed("r1", node_id="big", cores=4, memory_gb=8.0, state=ReplicaState.STOPPING),
        replica_placed("r2", node_id="elsewhere", cores=4, memory_gb=8.0),
    ]
    assert free_on(big, others) == Free(cores=8, memory_gb=32.0)


def test_free_memory_has_no_float_noise() -> None:
    n = node("n", cores=8, memory_gb=1.0)
    held = [replica_placed(f"r{i}", node_id="n", cores=0, memory_gb=0.1) for i in range(3)]
    assert free_on(n, held).memory_gb == 0.7


# --- misfit: the node itself -------------------------------------------------------------------


def test_a_small_profile_fits_an_empty_node() -> None:
    small = node_2_cores()
    assert misfit(cpu_profile(cores=2, memory_gb=8.0), small, all_free(small)) is None


def test_a_cordoned_node_takes_nothing() -> None:
    n = node_8_cores("maint", cordoned=True)
    assert misfit(cpu_profile(), n, all_free(n)) == "node maint is cordoned"


def test_a_draining_node_takes_nothing() -> None:
    n = node_8_cores("old", draining=True, cordoned=True)
    assert misfit(cpu_profile(), n, all_free(n)) == "node old is draining"


# --- lost --------------------------------------------------------------------------------------


def test_a_node_is_lost_once_its_heartbeat_is_older_than_the_timeout() -> None:
    assert lost(silent_node("n2", silent_s=NODE_TIMEOUT.total_seconds()), NOW) is None
    assert lost(silent_node("n2", silent_s=47), NOW) == Why(
        "node n2 is lost (no heartbeat for 47s)", "are lost", "node n2 is lost"
    )
    assert lost(silent_node("n2", silent_s=47), NOW, timedelta(minutes=1)) is None


def test_a_node_that_never_reported_is_lost() -> None:
    why = lost(node_8_cores("new", heartbeat_at=None), NOW)
    assert why is not None and why.reason == "node new is lost (it has never reported)"


# --- reasons come with a phrase to count nodes by ----------------------------------------------


def test_reasons_carry_a_node_less_phrase() -> None:
    eu = node_8_cores("eu-1", labels={"zone": "eu"})
    assert lacks(cpu_profile(node_selector={"zone": "us"}), eu) == Why(
        "node eu-1 lacks label zone=us", "lack label zone=us", "node eu-1 lacks label zone=us"
    )
    why = short(cpu_profile(memory_gb=4.0), eu, 8, 1.5, {})
    assert why is not None
    assert (why.reason, why.group) == (
        "needs 4 GB memory; node eu-1 has 1.5 of 32 GB free",
        "have less than 4 GB memory free",
    )


def test_node_selector_needs_every_label_with_the_same_value() -> None:
    eu = node_8_cores("eu-1", labels={"zone": "eu", "disk": "ssd"})
    wants_eu_ssd = cpu_profile(node_selector={"zone": "eu", "disk": "ssd"})
    wants_us = cpu_profile(node_selector={"zone": "us"})
    wants_gpu_label = cpu_profile(node_selector={"accel": "yes"})

    assert misfit(wants_eu_ssd, eu, all_free(eu)) is None
    assert misfit(wants_us, eu, all_free(eu)) == "node eu-1 lacks label zone=us"
    assert misfit(wants_gpu_label, eu, all_free(eu)) == "node eu-1 lacks label accel=yes"


# --- misfit: GPUs ------------------------------------------------------------------------------


def test_a_gpu_profile_does_not_fit_a_node_without_gpus() -> None:
    cpu_only = node_8_cores()
    reason = misfit(gpu_profile(gpu=1, gpu_class="l4"), cpu_only, all_free(cpu_only))
    assert reason == "needs 1 GPU(s) of class l4; node big has 0"


def test_the_gpu_class_must_match() -> None:
    a100 = gpu_node("a100-box", gpus={"a100": 2})
    reason = misfit(gpu_profile(gpu=1, gpu_class="l4"), a100, all_free(a100))
    assert reason == "needs 1 GPU(s) of class l4; node a100-box has 0"
    assert misfit(gpu_profile(gpu=2, gpu_class="a100"), a100, all_free(a100)) is None


def test_the_gpu_count_must_be_there() -> None:
    one_l4 = gpu_node("g", gpus={"l4": 1})
    reason = misfit(gpu_profile(gpu=2, gpu_class="l4"), one_l4, all_free(one_l4))
    assert reason == "needs 2 GPU(s) of class l4; node g has 1"


def test_without_a_class_the_gpus_must_come_from_one_class() -> None:
    # One engine does not split across GPU classes: 1 L4 + 1 A100 is not 2 GPUs for it.
    mixed = gpu_node("mixed", gpus={"l4": 1, "a100": 1})
    assert misfit(gpu_profile(gpu=1, gpu_class=None), mixed, all_free(mixed)) is None
    reason = misfit(gpu_profile(gpu=2, gpu_class=None), mixed, all_free(mixed))
    assert reason == "needs 2 GPU(s) of class any; node mixed has 1"


# --- misfit: cores and memory, as capacity and as what is free ---------------------------------


def test_more_cores_than_the_node_has_at_all() -> None:
    small = node_2_cores()
    reason = misfit(cpu_profile(cores=4), small, all_free(small))
    assert reason == "needs 4 cores; node small has only 2"


def test_more_memory_than_the_node_has_at_all() -> None:
    small = node_2_cores()
    reason = misfit(cpu_profile(cores=1, memory_gb=12.5), small, all_free(small))
    assert reason == "needs 12.5 GB memory; node small has only 8 GB"


def test_cores_the_node_has_but_others_hold() -> None:
    big = node_8_cores()
    free = free_on(big, [replica_placed("r1", node_id="big", cores=7, memory_gb=1.0)])
    reason = misfit(cpu_profile(cores=2), big, free)
    assert reason == "needs 2 cores; node big has 1 of 8 free"


def test_memory_the_node_has_but_others_hold() -> None:
    big = node_8_cores()
    free = free_on(big, [replica_placed("r1", node_id="big", cores=1, memory_gb=30.0)])
    reason = misfit(cpu_profile(cores=1, memory_gb=4.0), big, free)
    assert reason == "needs 4 GB memory; node big has 2 of 32 GB free"


def test_an_overcommitted_node_reports_zero_free_not_a_negative_number() -> None:
    # A node that came back smaller than what was placed on it.
    small = node_2_cores()
    no_cores = Free(cores=-2, memory_gb=8.0)
    no_memory = Free(cores=2, memory_gb=-1.5)

    cores_reason = misfit(cpu_profile(cores=1), small, no_cores)
    memory_reason = misfit(cpu_profile(cores=1, memory_gb=1.0), small, no_memory)

    assert cores_reason is not None and cores_reason.endswith("node small has 0 of 2 free")
    assert memory_reason == "needs 1 GB memory; node small has 0 of 8 GB free"


def test_exactly_the_free_amount_fits() -> None:
    small = node_2_cores()
    free = free_on(small, [replica_placed("r1", node_id="small", cores=1, memory_gb=4.0)])
    assert misfit(cpu_profile(cores=1, memory_gb=4.0), small, free) is None
