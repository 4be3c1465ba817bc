"""Serving cooldowns shared through a real Redis: a dead target seen by one process is skipped by
another's next request, and a process that starts later finds the cooldowns under way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from llmgw.core.clock import FakeClock
from llmgw.core.routes import Cooldown, Fallback, RouteSpec, Target
from llmgw.core.types import LocalSource, Model, Profile
from llmgw.gateway.upstream.router import Router
from llmgw.gateway.upstream.shared_cooldowns import CooldownBus
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from tests.support.redis_server import RedisServer

SPEC = RouteSpec(name="chat", targets=[Target(model="a"), Target(model="b")],
                 fallback=Fallback(cooldown=Cooldown(failures=1, cooldown_s=30)))


def table() -> RoutingTable:
    def route(name: str) -> Serving:
        model = Model(name=name, source=LocalSource(path=f"/{name}.gguf"), profiles=[Profile(name="cpu")])
        return Serving(model, (Upstream(f"rep-{name}", f"http://127.0.0.1:1/{name}"),))
    return RoutingTable({"a": route("a"), "b": route("b")})


class Process:
    """One process's router, listening on the cooldown channel."""

    def __init__(self, redis_server: RedisServer) -> None:
        self.client = aioredis.Redis.from_url(redis_server.url)
        self.router = Router(FakeClock(), bus=CooldownBus(self.client, 1.0))
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        assert self.router.bus is not None
        self.task = asyncio.create_task(self.router.bus.run(self.router.cooled_elsewhere))
        await asyncio.wait_for(self.router.bus.listening.wait(), 5)

    async def stop(self) -> None:
        assert self.task is not None and self.router.bus is not None
        self.task.cancel()
        await asyncio.wait({self.task})
        await self.router.bus.close()
        await self.client.aclose()

    def cooling(self) -> set[str]:
        return {s.name for s in self.router.states(SPEC, table()) if s.cooling}

    async def until_cooling(self, target: str) -> None:
        async with asyncio.timeout(5):
            while target not in self.cooling():
                await asyncio.sleep(0.01)


@pytest.fixture
async def two(redis_server: RedisServer) -> AsyncIterator[tuple[Process, Process]]:
    made = (Process(redis_server), Process(redis_server))
    for p in made:
        await p.start()
    yield made
    for p in made:
        await p.stop()


async def test_a_cooldown_one_process_starts_is_kept_by_the_other(two: tuple[Process, Process]) -> None:
    first, second = two
    first.router.failed(SPEC, "a", SPEC.fallback.on[0])
    assert first.cooling() == {"a"}
    await second.until_cooling("a")
    # The other's next plan skips it: b first, a not at all while it cools.
    plan = second.router.plan(SPEC, table())
    assert [r.model.name for r in plan.targets] == ["b"]


async def test_a_process_that_starts_later_finds_the_cooldowns_under_way(
        two: tuple[Process, Process], redis_server: RedisServer) -> None:
    two[0].router.failed(SPEC, "b", SPEC.fallback.on[0])
    await two[1].until_cooling("b")
    late = Process(redis_server)
    await late.start()
    try:
        await late.until_cooling("b")
    finally:
        await late.stop()
