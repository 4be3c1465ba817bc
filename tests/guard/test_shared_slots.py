"""Judge slots shared through a real redis-server: two servers' queues over one replica never
hold more than its slots together, a slot one gives back is taken by the other, a hold of a
server that died expires with its budget, and a Redis that does not answer leaves each server
to its own book."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from llmgw.guard import shared_slots
from llmgw.guard.admission import Slot
from llmgw.guard.judge_queue import JudgeQueue
from llmgw.guard.shared_slots import SharedSlots
from llmgw.store.redis_pipe import Endpoint, RedisPipe
from tests.support.redis_server import RedisServer


def server_slots(redis_server: RedisServer, timeout_s: float = 2.0) -> SharedSlots:
    return SharedSlots(RedisPipe(Endpoint.from_url(redis_server.url), timeout_s,
                                 shared_slots.SCRIPTS))


@pytest.fixture
async def two_servers(redis_server: RedisServer) -> AsyncIterator[list[JudgeQueue]]:
    """One judge's queue in each of two servers, over one replica of two slots."""
    queues = []
    for _ in range(2):
        q = JudgeQueue("j1", time.monotonic, cluster=server_slots(redis_server))
        q.sync({"rep-1": 2})
        queues.append(q)
    yield queues
    for q in queues:
        q.close()


async def test_two_servers_never_hold_more_than_the_replicas_slots(
        two_servers: list[JudgeQueue]) -> None:
    holding: list[tuple[JudgeQueue, Slot]] = []
    changed = asyncio.Event()

    async def judgment(q: JudgeQueue, i: int) -> None:
        slot = await q.acquire(f"prompt {i}", time.monotonic() + 30)
        holding.append((q, slot))
        changed.set()

    tasks = [asyncio.create_task(judgment(two_servers[i % 2], i)) for i in range(8)]
    served = 0
    while served < 8:
        while len(holding) < min(2, 8 - served):
            changed.clear()
            await changed.wait()
        assert len(holding) == min(2, 8 - served)  # never a third on the replica
        assert len({s.index for _, s in holding}) == len(holding)
        q, slot = holding.pop(0)
        q.release(slot, 0.1)
        served += 1
    await asyncio.gather(*tasks)
    assert {q.load().served for q in two_servers} == {4}


async def test_a_dead_servers_hold_expires_with_its_budget(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_slots, "HOLD_MARGIN_S", 0.0)
    dead, alive = server_slots(redis_server), server_slots(redis_server)
    assert await dead.take("rep-1", 0, dead.token(), hold_s=0.2)  # and never given back
    assert not await alive.take("rep-1", 0, alive.token(), hold_s=5)
    q = JudgeQueue("j1", time.monotonic, cluster=alive)
    q.sync({"rep-1": 1})
    # Waits while the dead server's hold lasts, then gets the slot: Redis' clock, nothing to
    # await here but the queue's own looks.
    slot = await q.acquire("p", time.monotonic() + 5)
    assert slot.index == 0 and slot.token
    q.release(slot, 0.1)
    q.close()


async def test_a_paused_redis_leaves_each_server_to_its_own_book(
        redis_server: RedisServer) -> None:
    slots = server_slots(redis_server, timeout_s=0.1)
    q = JudgeQueue("j1", time.monotonic, cluster=slots)
    q.sync({"rep-1": 1})
    redis_server.pause()
    try:
        started = time.monotonic()
        slot = await q.acquire("p", time.monotonic() + 5)  # taken here alone
        assert time.monotonic() - started < 1.0
        q.release(slot, 0.1)
        slot = await q.acquire("p", time.monotonic() + 5)  # at once, Redis left alone a while
        q.release(slot, 0.1)
    finally:
        redis_server.resume()
        q.close()
