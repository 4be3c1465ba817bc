"""The cache in a real Redis: shared by every process, bounded per model (the oldest out
first), each answer until its time to live ends, and purged for one model or all."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from llmgw.core.settings import LimitsSettings
from llmgw.gateway import shared_limits
from llmgw.gateway.cache.shared import PREFIX, SCRIPTS, InRedis
from llmgw.store.redis_pipe import RedisPipe
from tests.support.redis_server import RedisServer


@pytest.fixture
async def pipes(redis_server: RedisServer) -> AsyncIterator[list[RedisPipe]]:
    """Two processes' connections to one Redis."""
    made = [shared_limits.connect(LimitsSettings(redis_url=redis_server.url,
                                                 redis_timeout_ms=2000), scripts=SCRIPTS)
            for _ in range(2)]
    assert all(m is not None for m in made)
    yield [m.pipe for m in made if m is not None]
    for m in made:
        if m is not None:
            await m.close()


async def test_an_answer_one_process_keeps_the_other_finds(pipes: list[RedisPipe]) -> None:
    one, other = (InRedis(p, 10) for p in pipes)
    await one.put("k", "m", b"answer", 60)
    assert await other.get("k") == b"answer" and await other.get("nope") is None
    assert await other.count() == {"m": 1}


async def test_a_model_keeps_at_most_its_bound_the_oldest_going_first(pipes: list[RedisPipe]) -> None:
    clock = [1000.0]
    store = InRedis(pipes[0], 3, lambda: clock[0])
    for i in range(5):
        clock[0] += 1
        await store.put(f"k{i}", "m", b"x", 60)
    await store.put("other", "n", b"x", 60)
    assert [await store.get(f"k{i}") for i in range(5)] == [None, None, b"x", b"x", b"x"]
    assert await store.count() == {"m": 3, "n": 1}


async def test_an_answer_is_kept_for_its_time_to_live(pipes: list[RedisPipe]) -> None:
    clock = [time.time()]
    store = InRedis(pipes[0], 10, lambda: clock[0])
    await store.put("k", "m", b"x", 60)
    ttl_ms = await pipes[0].call("PTTL", PREFIX + "a:k")
    assert 59_000 < ttl_ms <= 60_000  # Redis drops it then
    clock[0] += 61  # and the model's count leaves it out from then on
    assert await store.count() == {}


async def test_a_purge_empties_one_model_or_all_for_every_process(pipes: list[RedisPipe]) -> None:
    one, other = (InRedis(p, 10) for p in pipes)
    for i in range(3):
        await one.put(f"m{i}", "m", b"x", 60)
    await one.put("n0", "n", b"x", 60)
    assert await other.purge("m") == 3
    assert await one.get("m0") is None and await one.count() == {"n": 1}
    assert await other.purge(None) == 1 and await one.count() == {}
