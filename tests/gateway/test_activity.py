"""A server's activity: what waits in its queue and how it uses each local replica."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from llmgw.control import demand
from llmgw.core.demand import Activity, Queued, ReplicaUse
from llmgw.core.guard import Direction
from llmgw.core.settings import ControlSettings
from llmgw.gateway.activity import ActivityTracker
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.snapshot import Refresher
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.guard.judge_client import JudgeClient
from llmgw.guard.prompts import Turn
from llmgw.store.store import Store
from tests.factories import (
    KEY_SECRET,
    gemma_model,
    local_model,
    node,
    qwen_guard_model,
    remote_model,
    replica_ready,
)
from tests.fakes.judge import FakeJudge

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


async def test_a_judge_replica_that_judges_is_in_use_not_idle(any_store: Store) -> None:
    # A judge replica ready for 20 minutes, and judging: every judgment is a use of it, as a
    # request is of a chat model's replica (the console and `ctl model list` said "idle 20m").
    started = datetime.now(UTC) - timedelta(minutes=20)
    judge = qwen_guard_model()
    any_store.nodes.upsert(node("big", address="127.0.0.1"), started)
    any_store.catalog.add(judge, "test", started)
    async with FakeJudge() as engine:
        any_store.replicas.create(replica_ready("j1", judge.name, endpoint=engine.url + "/v1"),
                                  started)
        refresher = Refresher(any_store, KEY_SECRET)
        await refresher.refresh()
        queue = ColdQueue(ControlSettings(), time.monotonic, lambda _model: None)
        tracker = ActivityTracker(lambda: refresher.current.table, queue)
        client = JudgeClient(refresher.locate_judge)
        await client.start()
        try:
            replicas = any_store.replicas.list()
            assert demand.state(judge, replicas, tracker.snapshot(datetime.now(UTC)),
                                datetime.now(UTC)) == "idle 20m"

            await client.judge(judge.name, Direction.INPUT, [Turn("user", "Hello")], 5.0)

            now = datetime.now(UTC)
            activity = tracker.snapshot(now)
            assert demand.state(judge, replicas, activity, now) == "ready"
            used = activity.replicas["j1"].last_used
            assert used is not None and now - used < timedelta(minutes=1)
        finally:
            await client.close()
