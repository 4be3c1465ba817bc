"""The catalog's placement report (`ctl model resources`): plain data, and on a real SQLite store."""

from __future__ import annotations

import random

import pytest

from llmgw.control.catalog import CatalogService, placement
from llmgw.control.sizing import MemoryEstimate
from llmgw.core.clock import FakeClock
from llmgw.core.types import Fit, Node, Replica, ReplicaState
from llmgw.store.store import Store
from tests.control.test_scheduler import random_cluster
from tests.factories import (
    NOW,
    cpu_profile,
    gemma_model,
    node,
    node_2_cores,
    node_8_cores,
    qwen_guard_model,
    replica_pending,
    replica_placed,
)

FULL = "needs 1 cores; node local has 0 of 2 free"


def demo_on_a_2_core_node() -> tuple[list[Node], list[Replica]]:
    """What `server init --demo` leaves on a 2-core machine: the demo model and its judge, one
    core each, both running."""
    nodes = [node_2_cores("local")]
    replicas = [
        replica_placed("r-gemma", node_id="local", state=ReplicaState.READY),
        replica_placed("r-judge", model="qwen3guard-0.6b", node_id="local", state=ReplicaState.READY),
    ]
    return nodes, replicas


def test_a_running_model_fits_the_node_it_runs_on_and_one_more_does_not() -> None:
    nodes, replicas = demo_on_a_2_core_node()

    assert placement(gemma_model(), nodes, replicas, {}, NOW) == [
        Fit(profile="default", node_id="local", fits=True, reason=None, running=1, one_more=False,
            one_more_reason=FULL),
    ]
    # The judge, asked about in turn, sees the demo model's core as taken, not its own.
    assert placement(qwen_guard_model(), nodes, replicas, {}, NOW) == [
        Fit(profile="default", node_id="local", fits=True, reason=None, running=1, one_more=False,
            one_more_reason=FULL),
    ]


def test_a_model_that_fits_nowhere_says_so_in_both_columns() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=512)])
    reason = "needs 512 cores; node local has only 2"

    fit = placement(model, [node_2_cores("local")], [replica_pending()], {}, NOW)

    assert fit == [Fit(profile="default", node_id="local", fits=False, reason=reason, running=0,
                       one_more=False, one_more_reason=reason)]


def test_stopping_replicas_and_replicas_on_other_nodes_are_not_running_here() -> None:
    nodes = [node_2_cores("local"), node_8_cores("big")]
    replicas = [
        replica_placed("r-old", node_id="local", state=ReplicaState.STOPPING),
        replica_placed("r-big", node_id="big", cores=2),
        replica_placed("r-big2", node_id="big", cores=2),
        replica_placed("r-other", model="other", node_id="local", cores=2),
    ]

    fit = placement(gemma_model(), nodes, replicas, {}, NOW)

    other = "needs 1 cores; node local has 0 of 2 free"
    assert [(f.node_id, f.fits, f.reason, f.running, f.one_more) for f in fit] == [
        ("local", False, other, 0, False),
        ("big", True, None, 2, True),
    ]


def test_the_memory_estimate_explains_each_column_with_the_memory_free_in_it() -> None:
    # 16 GB: the model's own replica holds 10, another model 4. Without its own it fits (12 free);
    # one more would have 2.
    estimate = MemoryEstimate(weights_gb=9.0, kv_cache_gb=0.5, compute_gb=0.5, prompt_cache_gb=0.0,
                              total_gb=10.0, ctx=4096, parallel=1)
    model = gemma_model(profiles=[cpu_profile(memory_gb=10.0)])
    replicas = [
        replica_placed("r-mine", node_id="n", memory_gb=10.0),
        replica_placed("r-other", model="other", node_id="n", memory_gb=4.0),
    ]

    [fit] = placement(model, [node("n")], replicas, {"default": estimate}, NOW)

    assert fit.fits and fit.running == 1 and not fit.one_more
    assert fit.one_more_reason == (
        "needs 10 GB memory; node n has 2 of 16 GB free; estimate needs 10.00 GiB (weights 9.00 is "
        "the largest part: use a smaller quantization of the model); node has 2.00 GiB free"
    )


@pytest.mark.parametrize("seed", range(200))
def test_room_for_one_more_means_the_model_fits_and_running_counts_its_replicas(seed: int) -> None:
    nodes, replicas, model = random_cluster(random.Random(seed))

    fit = placement(model, nodes, replicas, {}, NOW)

    for f in fit:
        assert f.fits or not f.one_more, f
        assert f.running == sum(
            1 for r in replicas
            if r.model == model.name and r.node_id == f.node_id and r.state != ReplicaState.STOPPING
        )


# --- through the service, on a real store ------------------------------------------------------


async def test_resources_of_the_running_demo_model_say_it_fits_where_it_runs(store: Store) -> None:
    nodes, replicas = demo_on_a_2_core_node()
    store.nodes.upsert(nodes[0], NOW)
    store.catalog.add(gemma_model(), "test", NOW)
    store.catalog.add(qwen_guard_model(), "test", NOW)
    for r in replicas:
        store.replicas.create(r, NOW)

    res = await CatalogService(store, FakeClock(NOW)).resources("gemma3-270m")

    assert res.placement == [Fit(profile="default", node_id="local", fits=True, reason=None, running=1,
                                 one_more=False, one_more_reason=FULL)]
    assert [r.id for r in res.replicas] == ["r-gemma"]
