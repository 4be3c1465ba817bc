"""The keeper's writes through this server's wiring: fenced by the epoch this server leads at."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from llmgw.control.catalog import CatalogService
from llmgw.control.leader import Elector, Timing
from llmgw.control.notifier import Notifier
from llmgw.control.replica_keeper import Place, Stop, plan
from llmgw.control.scheduler import Unschedulable, schedule
from llmgw.core.clock import FakeClock
from llmgw.core.errors import StaleEpoch
from llmgw.core.types import Replica, ReplicaState
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.upstream.table import RoutingTable
from llmgw.node.supervisor import Status
from llmgw.server import wiring
from llmgw.server.cluster import Leadership
from llmgw.store.store import Store
from tests.factories import NOW, gemma_model, gpu_profile, h200_node, local_model
from tests.support.pg import fresh_database

TTL = timedelta(seconds=15)


async def nothing(*_args: object) -> None:
    pass


async def test_a_paused_leaders_keeper_writes_nothing_once_another_leads(
    postgres_url: str, tmp_path: Path
) -> None:
    store = Store.open(fresh_database(postgres_url))
    clock = FakeClock(NOW)
    try:
        a = Leadership(clock, server_id="server-a")
        a.elector = Elector("server-a", store.leases, clock, Timing(), nothing, nothing)
        lease = store.leases.acquire("server-a", clock.now(), TTL)
        assert lease is not None
        await a.elected(lease.epoch)
        apply = wiring.keeper_applier(store, clock, a.fence)
        await apply(Place("m1", "node-a", "cpu", 1, 1.0))

        # server-a is paused past its TTL (it still believes it leads); server-b takes over.
        clock.advance(16)
        assert store.leases.acquire("server-b", clock.now(), TTL) is not None
        with pytest.raises(StaleEpoch, match="epoch 1 is stale \\(epoch 2 held by server-b\\)"):
            await apply(Place("m1", "node-a", "cpu", 1, 1.0))

        assert len(store.replicas.list(model="m1")) == 1  # nothing written twice
    finally:
        store.close()


async def test_a_server_that_is_not_leading_writes_nothing(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    clock = FakeClock(NOW)
    try:
        follower = Leadership(clock, server_id="server-b")
        follower.elector = Elector("server-b", store.leases, clock, Timing(), nothing, nothing)
        apply = wiring.keeper_applier(store, clock, follower.fence)
        with pytest.raises(StaleEpoch, match="not the leader"):
            await apply(Place("m1", "node-a", "cpu", 1, 1.0))
        assert store.replicas.list() == []
    finally:
        store.close()


async def test_a_replica_stopped_to_make_room_says_so_while_it_stops(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    clock = FakeClock(NOW)
    try:
        apply = wiring.keeper_applier(store, clock, lambda: None)
        await apply(Place("phi-4", "node-a", "cpu", 1, 2.0))
        await apply(Place("mistral-7b", "node-a", "cpu", 1, 2.0))
        [phi] = store.replicas.list(model="phi-4")
        [mistral] = store.replicas.list(model="mistral-7b")

        await apply(Stop(phi.id, "stopped to make room for gemma3-270m (idle since 23:59:30)",
                         room_for="gemma3-270m", model="phi-4", node_id="node-a"))
        await apply(Stop(mistral.id, "mistral-7b is scaled to 0"))

        [phi] = store.replicas.list(model="phi-4")
        assert phi.state == ReplicaState.STOPPING
        assert phi.last_error == "stopped to make room for gemma3-270m (idle since 23:59:30)"
        [mistral] = store.replicas.list(model="mistral-7b")
        assert mistral.state == ReplicaState.STOPPING and mistral.last_error is None
        # The row goes once the engine stops; the swap is kept for `ctl model resources`.
        [swap] = store.install.evictions()
        assert (swap.replica, swap.model, swap.node, swap.room_for) == (
            phi.id, "phi-4", "node-a", "gemma3-270m")
        store.catalog.add(gemma_model(), "operator", NOW)
        resources = await CatalogService(store, clock).resources("gemma3-270m")
        assert resources.evictions == [swap]
    finally:
        store.close()


def test_the_keepers_cold_starts_and_evictions_are_counted_in_the_metrics() -> None:
    metrics = Metrics(lambda: RoutingTable({}))
    observe = wiring.keeper_metrics(metrics)
    observe(Place("gemma", "node-a", "cpu", 1, 1.0, cold=True))
    observe(Place("gemma", "node-a", "cpu", 1, 1.0))  # scaled up, not cold
    observe(Stop("rep-1", "stopped to make room for gemma", room_for="gemma", model="qwen"))
    observe(Stop("rep-2", "qwen is scaled to 0"))
    text = metrics.render().decode()
    assert 'llmgw_cold_starts_total{model="gemma"} 1.0' in text
    assert 'llmgw_evictions_total{model="qwen"} 1.0' in text


async def test_the_embedded_agents_report_reaches_every_process_before_it_returns(
    tmp_path: Path,
) -> None:
    # A request for a cold model may wait in an extra worker's queue: the replica's readiness
    # must reach that worker's snapshot now, as a remote agent's sync does, not at its next poll.
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    clock = FakeClock(NOW)
    try:
        await wiring.keeper_applier(store, clock, lambda: None)(
            Place("gemma3-270m", "local", "default", 1, 1.0, cold=True))
        [replica] = store.replicas.list()
        notifier = Notifier()
        woken = notifier.watch()
        seen_by_worker: list[ReplicaState] = []

        async def worker_refresh() -> None:
            seen_by_worker.extend(r.state for r in store.replicas.list())

        notifier.sync_with(worker_refresh)
        report = wiring.agent_reporter(store, clock, notifier.settle)
        await report(replica.id, Status(ReplicaState.READY, endpoint="http://127.0.0.1:9000/v1",
                                        pid=4242))

        assert seen_by_worker == [ReplicaState.READY]
        assert woken.is_set()  # this process's loops look again too
    finally:
        store.close()


async def test_a_replica_placed_on_gpus_is_stored_with_its_devices(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    clock = FakeClock(NOW)
    try:
        apply = wiring.keeper_applier(store, clock, lambda: None)
        share = gpu_profile(gpu_class="h200", gpu_memory_gb=60.0, gpu_share=True)
        shared = local_model("shared", profiles=[share], replicas=2)
        # One replica waits from an earlier pass, the other is new: both are placed.
        store.replicas.create(Replica(id="rep-pending", model="shared", last_error="wait"), NOW)
        for action in plan([shared], [h200_node()], store.replicas.list(), NOW):
            await apply(action)

        rows = store.replicas.list(model="shared")
        assert [r.devices for r in rows] == [["GPU-h200-00-5f3c"]] * 2
        # The device is shared: a model that does not share finds it taken.
        alone = local_model("alone", profiles=[gpu_profile(gpu_class="h200", gpu_memory_gb=1.0)])
        assert isinstance(schedule(alone, [h200_node()], rows, NOW, models=[shared, alone]),
                          Unschedulable)
    finally:
        store.close()
