"""The request queue: requests for a model with no ready replica wait, in arrival order, for a
routing table that has one."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmgw.core import tracing
from llmgw.core.demand import Queued
from llmgw.core.errors import EngineFailing, ModelNotFound, NoReadyReplica, QueueFull, QueueTimeout
from llmgw.core.settings import ControlSettings, TelemetrySettings
from llmgw.core.tracing import Kind
from llmgw.core.types import ReplicaState
from llmgw.gateway.inflight import InFlight, SharedInFlight, entry
from llmgw.gateway.queue import QUEUE_FULL_RETRY_S, ColdQueue
from llmgw.gateway.snapshot import Refresher
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.server.telemetry import OtelTracer
from llmgw.store.store import Store
from tests.factories import KEY_SECRET, gemma_model, node, replica_placed

MODEL = gemma_model(replicas=0)
COLD = Serving(MODEL, (), unavailable="no replica is placed yet (the model starts on demand)")
LOADING = Serving(MODEL, (), unavailable="starting", loading_on="node-2")
READY = Serving(MODEL, (Upstream("r1", "http://127.0.0.1:39001/v1"),))


class Rig:
    """A queue on a fake monotonic clock, and the routing table its waiters see."""

    def __init__(self, flight: InFlight | None = None, **settings: float) -> None:
        self.t = 1000.0
        self.table = RoutingTable({MODEL.name: COLD})
        self.cold: list[str] = []
        self.queue = ColdQueue(ControlSettings(**settings), lambda: self.t, self.cold.append,
                               flight)

    def current(self) -> Serving:
        return self.table.resolve(MODEL.name)

    def waiter(self) -> asyncio.Task[Serving]:
        return asyncio.create_task(self.queue.wait(self.current(), self.current))

    def publish(self, route: Serving | None) -> None:
        """A new routing table (without the model for None), as the refresher hands it over."""
        self.table = RoutingTable({MODEL.name: route} if route is not None else {})
        self.queue.refreshed(self.table)


async def settled() -> None:
    """Let every ready task run until it waits again."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_route_with_a_replica_goes_through_without_waiting() -> None:
    rig = Rig()
    assert await rig.queue.wait(READY, rig.current) is READY
    assert rig.cold == [] and rig.queue.depths() == {}


async def test_waiters_are_released_in_arrival_order_when_a_replica_is_ready() -> None:
    rig = Rig()
    order: list[int] = []

    async def request(n: int) -> None:
        await rig.queue.wait(COLD, rig.current)
        order.append(n)

    tasks = [asyncio.create_task(request(n)) for n in range(5)]
    await settled()
    rig.publish(LOADING)  # still not ready: nobody moves
    await settled()
    assert order == [] and rig.queue.depths() == {MODEL.name: 5}

    rig.publish(READY)
    await asyncio.gather(*tasks)

    assert order == [0, 1, 2, 3, 4]
    assert rig.queue.depths() == {}


async def test_a_full_queue_turns_the_next_request_away_with_a_retry_after() -> None:
    rig = Rig(queue_max=2)
    waiting = [rig.waiter(), rig.waiter()]
    await settled()

    with pytest.raises(QueueFull) as caught:
        await rig.queue.wait(COLD, rig.current)

    assert caught.value.status == 429 and caught.value.code == "queue_full"
    assert caught.value.retry_after_s == QUEUE_FULL_RETRY_S
    assert "queue for it is full (2 waiting)" in caught.value.message
    rig.publish(READY)
    assert await asyncio.gather(*waiting) == [READY, READY]


async def test_with_no_queue_a_cold_request_is_refused_at_once_but_still_starts_the_model() -> None:
    rig = Rig(queue_max=0)
    with pytest.raises(NoReadyReplica, match="queue_max is 0") as caught:
        await rig.queue.wait(COLD, rig.current)
    assert caught.value.status == 503
    assert rig.cold == [MODEL.name] and rig.queue.depths() == {}


async def test_a_request_past_its_timeout_says_where_the_model_is_loading_and_how_long_it_waited() -> None:
    rig = Rig(queue_timeout_s=120)
    first = rig.waiter()
    await settled()
    rig.t += 30
    second = rig.waiter()
    await settled()

    rig.t += 91  # the first has waited 121 s, the second 91 s
    rig.publish(LOADING)

    with pytest.raises(QueueTimeout) as caught:
        await first
    assert caught.value.status == 503 and caught.value.code == "queue_timeout"
    assert caught.value.message == "gemma3-270m is loading on node-2: waited 121 s"
    assert not second.done()
    assert rig.queue.depths() == {MODEL.name: 1}
    rig.publish(READY)
    assert await second is READY


async def test_queue_max_holds_for_the_server_across_its_workers(
        two_workers: tuple[SharedInFlight, SharedInFlight]) -> None:
    worker_0, worker_1 = Rig(two_workers[0], queue_max=2), Rig(two_workers[1], queue_max=2)
    waiting = [worker_0.waiter(), worker_1.waiter()]
    await settled()

    # Each worker has one waiter; the server has two, its queue_max: both workers refuse a third.
    for rig in (worker_0, worker_1):
        with pytest.raises(QueueFull, match=r"full \(2 waiting\)"):
            await rig.queue.wait(COLD, rig.current)

    # A waiter that leaves on one worker frees its place for the other.
    waiting[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting[0]
    again = worker_1.waiter()
    await settled()
    assert worker_1.queue.depths() == {MODEL.name: 2}
    worker_1.publish(READY)
    assert await asyncio.gather(waiting[1], again) == [READY, READY]
    assert two_workers[0].get(entry("queue", MODEL.name)) == (0, 0)


async def test_a_request_waiting_to_be_placed_times_out_with_the_reason() -> None:
    rig = Rig(queue_timeout_s=0.01)  # the loop's own timer: no new table ever comes
    # The fake clock stands still, so the message says 0 s.
    with pytest.raises(QueueTimeout) as caught:
        await rig.queue.wait(COLD, rig.current)
    assert caught.value.message == ("gemma3-270m is waiting for a replica (no replica is placed yet "
                                    "(the model starts on demand)): waited 0 s")
    assert rig.queue.depths() == {}


async def test_a_client_that_leaves_leaves_the_queue_and_frees_its_place() -> None:
    rig = Rig(queue_max=1)
    gone = rig.waiter()
    await settled()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert rig.queue.depths() == {}

    # Its place is free again, and the next arrival is a new cold episode.
    again = rig.waiter()
    await settled()
    assert rig.queue.depths() == {MODEL.name: 1}
    rig.publish(READY)
    assert await again is READY
    assert rig.cold == [MODEL.name, MODEL.name]


async def test_a_model_that_fits_nowhere_fails_at_once_and_so_do_its_waiters() -> None:
    rig = Rig()
    nowhere = Serving(MODEL, (), unavailable="pending", nowhere="node big has 1.0 GB free, needs 8.0 GB")
    with pytest.raises(NoReadyReplica, match="fits on no node: node big has 1.0 GB free") as caught:
        await rig.queue.wait(nowhere, rig.current)
    assert caught.value.status == 503
    assert rig.cold == []  # it never waited, so it called for no replica

    waiting = rig.waiter()
    await settled()
    rig.publish(nowhere)
    with pytest.raises(NoReadyReplica, match="fits on no node"):
        await waiting
    assert rig.queue.depths() == {}


async def test_the_server_is_told_once_per_cold_episode() -> None:
    rig = Rig()
    first = [rig.waiter() for _ in range(3)]
    await settled()
    assert rig.cold == [MODEL.name]

    rig.publish(READY)
    await asyncio.gather(*first)
    rig.publish(COLD)  # the replica went away again (idle)
    later = rig.waiter()
    await settled()
    assert rig.cold == [MODEL.name, MODEL.name]
    rig.publish(READY)
    await later


async def test_what_waits_is_reported_with_its_oldest_arrival() -> None:
    rig = Rig()
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    first = rig.waiter()
    await settled()
    rig.t += 7
    second = rig.waiter()
    await settled()
    rig.t += 3

    assert rig.queue.queued(now) == {MODEL.name: Queued(waiting=2, since=now - timedelta(seconds=10))}
    rig.publish(READY)
    await asyncio.gather(first, second)
    assert rig.queue.queued(now) == {}


async def test_a_model_removed_from_the_catalog_fails_its_waiters_as_not_found() -> None:
    rig = Rig()
    waiting = rig.waiter()
    await settled()
    rig.publish(None)
    with pytest.raises(ModelNotFound):
        await waiting
    assert rig.queue.depths() == {}


async def test_a_waiter_is_released_by_the_refreshers_next_snapshot(any_store: Store) -> None:
    now = datetime.now(UTC)
    any_store.nodes.upsert(node("big", address="127.0.0.1"), now)
    any_store.catalog.add(MODEL, "test", now)
    cold: list[str] = []
    queue = ColdQueue(ControlSettings(), time.monotonic, cold.append)
    refresher = Refresher(any_store, KEY_SECRET, on_refresh=queue.refreshed)
    await refresher.refresh()

    def current() -> Serving:
        return refresher.current.table.resolve(MODEL.name)

    waiting = asyncio.create_task(queue.wait(current(), current))
    await settled()
    any_store.replicas.create(replica_placed("r1"), now)  # starting on node big
    await refresher.refresh()
    await settled()
    assert cold == [MODEL.name] and not waiting.done()
    assert current().loading_on == "big"

    any_store.replicas.update("r1", now, state=ReplicaState.READY, endpoint="http://127.0.0.1:39001/v1")
    await refresher.refresh()

    route = await waiting
    assert [u.id for u in route.upstreams] == ["r1"]
    assert queue.depths() == {}


async def test_a_burst_never_queues_more_than_the_bound() -> None:
    rig = Rig(queue_max=5)
    burst = [rig.waiter() for _ in range(20)]
    await settled()
    turned_away = [t for t in burst if t.done()]
    assert len(turned_away) == 15 and all(isinstance(t.exception(), QueueFull) for t in turned_away)
    assert rig.queue.depths() == {MODEL.name: 5} and rig.cold == [MODEL.name]
    rig.publish(READY)
    assert await asyncio.gather(*[t for t in burst if not t.done()]) == [READY] * 5
    assert rig.queue.depths() == {}


async def test_a_traced_wait_is_a_span_under_the_request_with_its_place_and_time() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(TelemetrySettings(otlp_endpoint="http://collector.invalid:4318"), exporter)
    rig = Rig()
    with tracing.active(tracer.root("chat gemma3-270m", Kind.SERVER)):
        waiting = rig.waiter()
        await settled()
        rig.t += 2.5  # the replica took 2.5 s to come up
        rig.publish(READY)
        assert await waiting is READY
    tracer.close()

    spans = {s.name: s for s in exporter.get_finished_spans()}
    wait, request = spans["queue wait"], spans["chat gemma3-270m"]
    assert wait.parent is not None and wait.parent.span_id == request.context.span_id
    assert dict(wait.attributes or {}) == {"gen_ai.request.model": MODEL.name,
                                           "llmgw.queue.position": 1, "llmgw.queue.waited_s": 2.5}


async def test_a_model_whose_every_replica_failed_is_refused_at_once_and_so_are_its_waiters() -> None:
    rig = Rig()
    failing = Serving(MODEL, (), unavailable="failed: llama-server stopped …",
                    failing="llama-server stopped with an illegal instruction (SIGILL): rebuild it")
    with pytest.raises(EngineFailing, match="its engine keeps failing: llama-server stopped with an "
                                            "illegal instruction") as caught:
        await rig.queue.wait(failing, rig.current)
    assert caught.value.status == 503 and caught.value.code == "engine_failing"

    # A request already waiting for the first start is refused as soon as the start fails, not
    # after the queue's timeout (the fake clock never moves here).
    rig.publish(LOADING)
    waiting = rig.waiter()
    await settled()
    rig.publish(failing)
    with pytest.raises(EngineFailing):
        await waiting
    assert rig.queue.depths() == {}
