"""Replicas placed on GPUs one by one: which devices, never two on one unless both share, the
memory split across several, and the reasons' words."""

from __future__ import annotations

from llmgw.control.scheduler import Cluster, Placement, Unschedulable, explain, schedule
from llmgw.core.types import Model, Node, Replica
from tests.factories import (
    NOW,
    a100_pair_node,
    gpu_device,
    gpu_node,
    gpu_profile,
    gpus_node,
    h200_node,
    local_model,
    replica_placed,
)

H200 = "GPU-h200-00-5f3c"
A100_40, A100_80 = "GPU-a100-40gb-00-5f3c", "GPU-a100-80gb-01-5f3c"


def sized(gb: float, *, gpu: int = 1, gpu_class: str | None = None, share: bool = False,
          name: str = "m") -> Model:
    """A model whose GPU profile needs `gb` across its devices."""
    profile = gpu_profile(gpu=gpu, gpu_class=gpu_class, gpu_memory_gb=gb, gpu_share=share)
    return local_model(name, profiles=[profile])


def placed(decision: Placement | Unschedulable) -> Placement:
    assert isinstance(decision, Placement), decision
    return decision


def reasons(model: Model, nodes: list[Node], replicas: list[Replica] | None = None,
            models: tuple[Model, ...] = ()) -> list[str | None]:
    return [v.reason for v in explain(model, nodes, replicas or [], NOW, models=models)]


def test_a_replica_takes_one_device_of_its_class_and_names_it() -> None:
    where = placed(schedule(sized(21.3, gpu_class="h200"), [h200_node()], [], NOW))

    assert (where.node_id, where.gpu_class, where.devices) == ("h200-box", "h200", (H200,))


def test_of_two_devices_that_fit_the_fuller_is_taken_and_the_larger_stays_for_a_larger_model() -> None:
    nodes = [a100_pair_node()]

    assert placed(schedule(sized(30.0), nodes, [], NOW)).devices == (A100_40,)
    assert placed(schedule(sized(60.0), nodes, [], NOW)).devices == (A100_80,)


def test_no_two_replicas_go_on_one_device_in_a_plan_or_after_it() -> None:
    small = sized(10.0, gpu_class="h200")
    cluster = Cluster([h200_node()], [], NOW)
    first = placed(cluster.schedule(small))
    cluster.take(small.name, first)

    # 10 GB of 139.8 leave room, but the device is the first replica's alone.
    assert isinstance(cluster.schedule(small), Unschedulable)
    running = [replica_placed("r1", "m", node_id="h200-box", profile="gpu", gpu_class="h200",
                              gpus=1, devices=[H200])]
    assert reasons(small, [h200_node()], running, (small,)) == [
        "needs 1 GPU(s) of class h200; node h200-box has 0 of 1 free"]


def test_a_replica_placed_before_devices_were_tracked_still_holds_one() -> None:
    old = [replica_placed("r1", "other", node_id="gpu", gpu_class="l4", gpus=1)]

    assert isinstance(schedule(sized(1.0, gpu_class="l4"), [gpu_node()], old, NOW), Unschedulable)


def test_sharing_replicas_share_a_device_while_its_memory_lasts() -> None:
    shared = sized(60.0, gpu_class="h200", share=True)
    cluster = Cluster([h200_node()], [], NOW)
    for _ in range(2):
        where = placed(cluster.schedule(shared))
        assert where.devices == (H200,)
        cluster.take(shared.name, where)

    assert [v.reason for v in cluster.explain(shared)] == [
        "needs 60.0 GB on one device; largest free 19.8 GB on node h200-box"]


def test_a_device_shared_by_some_is_closed_to_a_replica_that_does_not_share_and_back() -> None:
    shared = sized(20.0, gpu_class="h200", share=True, name="shared")
    alone = sized(20.0, gpu_class="h200", name="alone")
    on_it = [replica_placed("r1", "shared", node_id="h200-box", profile="gpu",
                            gpu_class="h200", gpus=1, devices=[H200])]
    taken = [replica_placed("r2", "alone", node_id="h200-box", profile="gpu",
                            gpu_class="h200", gpus=1, devices=[H200])]
    catalog = (shared, alone)

    assert isinstance(schedule(alone, [h200_node()], on_it, NOW, models=catalog), Unschedulable)
    assert isinstance(schedule(shared, [h200_node()], taken, NOW, models=catalog), Unschedulable)
    assert placed(schedule(shared, [h200_node()], on_it, NOW, models=catalog)).devices == (H200,)


def test_a_full_device_is_not_taken_and_the_reason_says_how_little_is_free() -> None:
    full = gpus_node("a", [gpu_device(0, "l4", 24.0, free_gb=0.0)])
    some = gpus_node("a", [gpu_device(0, "l4", 24.0, free_gb=16.0)])

    assert reasons(sized(21.3), [full]) == [
        "needs 21.3 GB on one device; largest free 0.0 GB on node a"]
    assert reasons(sized(21.3), [some]) == [
        "needs 21.3 GB on one device; largest free 16.0 GB on node a"]
    # A model whose need is not known still needs some memory free.
    assert isinstance(schedule(sized(0.0), [full], [], NOW), Unschedulable)


def test_declared_devices_fit_by_count_alone() -> None:
    where = placed(schedule(sized(500.0, gpu_class="l4"), [gpu_node(gpus={"l4": 2})], [], NOW))

    assert where.devices == ("l4-0",)


def test_a_replica_on_several_devices_splits_its_need_by_their_memory() -> None:
    pair = [a100_pair_node(gpu_class="a100")]

    # 90 GB is 30 on the 40 GB device and 60 on the 80 GB one.
    assert placed(schedule(sized(90.0, gpu=2), pair, [], NOW)).devices == (
        "GPU-a100-00-5f3c", "GPU-a100-01-5f3c")
    assert reasons(sized(130.0, gpu=2), pair) == [
        "needs 130.0 GB across 2 devices; most free 80.0 + 40.0 GB on node a100-box"]


def test_the_summary_of_a_model_that_fits_no_device_stays_the_same_as_free_memory_moves() -> None:
    summaries = {
        schedule(sized(21.3), [gpus_node("a", [gpu_device(0, "l4", 24.0, free_gb=free)])], [],
                 NOW).summary  # type: ignore[union-attr]
        for free in (16.0, 15.2)
    }

    assert summaries == {
        "does not fit: profile gpu: needs 21.3 GB on one device; node a has none with that free"}


def test_stopping_a_replica_in_the_plan_frees_its_device() -> None:
    model = sized(50.0, gpu_class="h200")
    running = replica_placed("r1", "other", node_id="h200-box", profile="gpu", gpu_class="h200",
                             gpus=1, devices=[H200])
    other = sized(50.0, gpu_class="h200", name="other")
    cluster = Cluster([h200_node()], [running], NOW, models=[model, other])

    assert cluster.fits_without(model, "h200-box", [running]) == Placement(
        "h200-box", model.profiles[0], "h200", (H200,))
    cluster.release(running)
    assert placed(cluster.schedule(model)).devices == (H200,)
