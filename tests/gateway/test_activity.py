"""A server's activity: what waits in its queue and how it uses each local replica."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from llmgw.core.demand import Activity, Queued, ReplicaUse
from llmgw.core.settings import ControlSettings
from llmgw.gateway.activity import ActivityTracker
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from tests.factories import gemma_model, local_model, remote_model

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


async def test_the_snapshot_has_the_queue_and_each_local_replicas_use() -> None:
    used = Upstream("r1", "http://127.0.0.1:39001/v1", outstanding=2,
                    last_used=(NOW - timedelta(seconds=40)).timestamp())
    never = Upstream("r2", "http://127.0.0.1:39002/v1")
    cold = local_model("cold", replicas=0)
    table = RoutingTable({
        "gemma3-270m": Serving(gemma_model(replicas=2), (used, never)),
        "cold": Serving(cold, ()),
        # A provider is no replica: the leader has nothing to scale there.
        "gpt-4o-mini": Serving(remote_model(),
                             (Upstream("remote:gpt-4o-mini", "https://x/v1", outstanding=5),)),
    })
    t = [50.0]
    queue = ColdQueue(ControlSettings(), lambda: t[0], lambda _model: None)
    waiting = asyncio.create_task(queue.wait(table.resolve("cold"), lambda: table.resolve("cold")))
    await asyncio.sleep(0)
    t[0] += 3

    activity = ActivityTracker(lambda: table, queue).snapshot(NOW)

    assert activity == Activity(
        queued={"cold": Queued(waiting=1, since=NOW - timedelta(seconds=3))},
        replicas={"r1": ReplicaUse(in_flight=2, last_used=NOW - timedelta(seconds=40)),
                  "r2": ReplicaUse(in_flight=0, last_used=None)},
        at=NOW,
    )
    waiting.cancel()
