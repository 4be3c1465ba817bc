"""The tool call's limits stage: tool calls per minute and in flight per key and team, shared by
a key's minted keys, and an upstream server's cap, each exact under a burst: across the workers
of a server (the default install: its in-flight table and windows) and across servers (the
shared Redis), as the model path's limits are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import LimitsUnavailable, RateLimited
from llmgw.core.mcp import McpServer
from llmgw.core.types import ApiKey, Limits, Team
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limit_kinds import tool_counter
from llmgw.gateway.limits import Limiter
from llmgw.gateway.mcp.call import ToolCall, ToolResult
from llmgw.gateway.mcp.stages.limits import limits_stage
from llmgw.store.store import Store
from tests.gateway.test_shared_limits import key_with, limiter_on, minted, shared
from tests.gateway.test_windows import ServerRig
from tests.support.redis_server import RedisServer

SERVER = McpServer(name="github", url="http://tools.example/mcp")


def call(key: ApiKey, server: McpServer = SERVER) -> ToolCall:
    return ToolCall(key=key, server=server, tool="search", arguments={"q": "x"})


class Upstream:
    """An upstream that holds every call until released, counting the calls that reached it."""

    def __init__(self, hold: bool = False) -> None:
        self.reached = 0
        self.waiting = 0  # calls it holds now
        self.changed = asyncio.Event()
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def __call__(self, _call: ToolCall) -> ToolResult:
        self.reached += 1
        self.waiting += 1
        self.changed.set()
        try:
            await self.release.wait()
        finally:
            self.waiting -= 1
        return ToolResult(content=[{"type": "text", "text": "ok"}])


async def burst(limiters: list[Limiter], calls: list[ToolCall], upstream: Upstream
                ) -> tuple[list[asyncio.Task[ToolResult]], list[RateLimited]]:
    """Every call at once, spread over `limiters`, until each has ended or waits upstream; the
    calls admitted and still running (while the upstream holds them), and the refusals."""
    stages = [limits_stage(lim) for lim in limiters]
    tasks = [asyncio.create_task(stages[i % len(stages)](c, upstream)) for i, c in enumerate(calls)]
    for t in tasks:
        t.add_done_callback(lambda _t: upstream.changed.set())

    async def settled() -> None:
        while sum(t.done() for t in tasks) + upstream.waiting < len(tasks):
            upstream.changed.clear()
            await upstream.changed.wait()

    await asyncio.wait_for(settled(), 10)
    refused = [t.exception() for t in tasks if t.done() and t.exception() is not None]
    assert all(isinstance(e, RateLimited) for e in refused)
    return [t for t in tasks if not t.done()], [e for e in refused if isinstance(e, RateLimited)]


@pytest.fixture
def server(tmp_path: Path, store: Store, clock: FakeClock) -> Iterator[ServerRig]:
    """One server of the default install: two workers over its in-flight table and windows."""
    rig = ServerRig(tmp_path / "server", store, clock)
    yield rig
    rig.close()


@pytest.fixture
async def processes(redis_server: RedisServer, clock: FakeClock) -> AsyncIterator[list[Limiter]]:
    """Four processes of an install with a shared Redis."""
    made = [Limiter(None, clock.now, shared=shared(redis_server, redis_timeout_ms=2000))
            for _ in range(4)]
    yield made
    for limiter in made:
        assert limiter.shared is not None
        await limiter.shared.close()


async def test_the_tool_call_over_its_keys_limit_per_minute_gets_429_until_the_minute_ends(
        clock: FakeClock) -> None:
    limiter = Limiter(None, clock.now)
    key = key_with(tool_calls_per_minute=3, rpm=1)
    admitted, refused = await burst([limiter], [call(key) for _ in range(5)], Upstream())
    assert refused and len(refused) == 2
    assert refused[0].status == 429 and refused[0].code == "rate_limit_tool_calls"
    assert refused[0].retry_after_s == 45  # the clock is 15 s into its minute
    assert "3 tool calls per minute" in refused[0].message
    limiter.admit(key, 0)  # the key's model requests count apart from its tool calls
    clock.advance(45)
    assert len((await burst([limiter], [call(key)], Upstream()))[1]) == 0


async def test_a_call_with_no_tool_limit_anywhere_counts_nothing(clock: FakeClock) -> None:
    limiter = Limiter(None, clock.now)
    upstream = Upstream()
    key = key_with(rpm=1)
    await burst([limiter], [call(key) for _ in range(50)], upstream)
    assert upstream.reached == 50
    minute = int(clock.now().timestamp()) // 60
    assert limiter.windows.get(tool_counter(key.id), minute) == (0, 0)


async def test_tool_calls_in_flight_hold_exactly_across_a_servers_workers(
        server: ServerRig) -> None:
    key = key_with(tool_concurrent=3)
    upstream = Upstream(hold=True)
    running, refused = await burst(server.workers, [call(key) for _ in range(12)], upstream)
    assert len(running) == 3 and upstream.reached == 3 and len(refused) == 9
    assert refused[0].code == "rate_limit_tool_concurrent" and refused[0].retry_after_s == 1
    upstream.release.set()
    await asyncio.gather(*running)
    again, _ = await burst(server.workers, [call(key) for _ in range(3)], Upstream(hold=True))
    assert len(again) == 3  # the ended calls' slots are free in either worker
    for t in again:
        t.cancel()
    await asyncio.gather(*again, return_exceptions=True)
    assert server.workers[0].flight.get(tool_counter(key.id))[0] == 0  # a cancelled call lets go


async def test_a_burst_over_four_processes_admits_exactly_the_tool_calls_per_minute(
        processes: list[Limiter]) -> None:
    key = key_with(tool_calls_per_minute=20)
    upstream = Upstream()
    _, refused = await burst(processes, [call(key) for _ in range(60)], upstream)
    assert upstream.reached == 20 and len(refused) == 40
    assert refused[0].code == "rate_limit_tool_calls"


async def test_tool_calls_in_flight_hold_exactly_over_four_processes(
        processes: list[Limiter]) -> None:
    key = key_with(tool_concurrent=4)
    upstream = Upstream(hold=True)
    running, refused = await burst(processes, [call(key) for _ in range(20)], upstream)
    assert len(running) == 4 and len(refused) == 16
    upstream.release.set()
    await asyncio.gather(*running)


async def test_an_upstream_servers_cap_holds_for_every_key_under_a_burst(
        processes: list[Limiter]) -> None:
    capped = SERVER.model_copy(update={"max_concurrency": 3})
    upstream = Upstream(hold=True)
    calls = [call(key_with(), capped) for _ in range(15)]  # fifteen keys, no limits of their own
    running, refused = await burst(processes, calls, upstream)
    assert len(running) == 3 and upstream.reached == 3 and len(refused) == 12
    assert refused[0].status == 429 and refused[0].code == "mcp_server_busy"
    assert refused[0].retry_after_s == 1 and "MCP server github" in refused[0].message
    upstream.release.set()
    await asyncio.gather(*running)
    assert len((await burst(processes, calls[:3], Upstream()))[1]) == 0  # freed everywhere


async def test_an_upstream_servers_cap_holds_across_a_servers_workers(server: ServerRig) -> None:
    capped = SERVER.model_copy(update={"max_concurrency": 2})
    upstream = Upstream(hold=True)
    running, refused = await burst(server.workers, [call(key_with(), capped) for _ in range(8)],
                                   upstream)
    assert len(running) == 2 and len(refused) == 6
    upstream.release.set()
    await asyncio.gather(*running)


async def test_keys_minted_by_a_key_share_its_tool_limits(processes: list[Limiter]) -> None:
    minter = key_with(tool_calls_per_minute=6)
    children = [minted(minter) for _ in range(3)]
    cache = KeyCache(b"", [minter, *children])
    for limiter in processes:
        limiter.keys = lambda: cache
    upstream = Upstream()
    _, refused = await burst(processes, [call(c) for c in children for _ in range(6)], upstream)
    assert upstream.reached == 6 and len(refused) == 12  # the minter's 6, not 6 each
    assert "(shared by the keys it minted)" in refused[0].message


async def test_a_teams_tool_limit_holds_for_all_its_keys(server: ServerRig) -> None:
    team = Team(name="t", limits=Limits(tool_concurrent=2))
    members = [key_with().model_copy(update={"team": "t", "team_id": team.id}) for _ in range(4)]
    cache = KeyCache(b"", members, [team])
    for limiter in server.workers:
        limiter.keys = lambda: cache
    upstream = Upstream(hold=True)
    running, refused = await burst(server.workers, [call(k) for k in members for _ in range(2)],
                                   upstream)
    assert len(running) == 2 and len(refused) == 6
    assert "of team t" in refused[0].message
    upstream.release.set()
    await asyncio.gather(*running)


async def test_default_tool_limits_apply_to_keys_that_set_none(clock: FakeClock) -> None:
    limiter = Limiter(None, clock.now, default=lambda: Limits(tool_calls_per_minute=2))
    upstream = Upstream()
    _, refused = await burst([limiter], [call(key_with()) for _ in range(1)] * 3, upstream)
    assert upstream.reached == 2 and len(refused) == 1


async def test_when_redis_stalls_tool_limits_hold_on_local_counts_or_refuse_when_closed(
        redis_server: RedisServer, clock: FakeClock) -> None:
    key = key_with(tool_calls_per_minute=4)
    async with limiter_on(redis_server, clock, redis_timeout_ms=50) as (limiter, _):
        upstream = Upstream()
        await burst([limiter], [call(key) for _ in range(2)], upstream)
        redis_server.pause()
        try:
            _, refused = await burst([limiter], [call(key) for _ in range(4)], upstream)
        finally:
            redis_server.resume()
        assert upstream.reached == 4 and len(refused) == 2  # this process's counts held it
    async with limiter_on(redis_server, clock, on_redis_error="closed") as (limiter, _):
        redis_server.kill()
        upstream = Upstream()
        with pytest.raises(LimitsUnavailable) as caught:
            await limits_stage(limiter)(call(key_with(tool_concurrent=1)), upstream)
        assert caught.value.status == 503 and upstream.reached == 0
