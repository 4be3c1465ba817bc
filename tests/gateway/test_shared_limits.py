"""Limits in the shared store, on a real redis-server: exact across servers in bursts, for a
key, a family and a team's budget; leases of a crashed process expire; a stopped or paused
Redis falls back to local counts (or refuses, closed) within its deadline, and the counts are
right after it comes back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anthropic
import openai
import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import LimitsUnavailable, RateLimited
from llmgw.core.settings import LimitsSettings
from llmgw.core.types import ApiKey, Limits, Team
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limits import Limiter, Ticket
from llmgw.gateway.shared_limits import SharedLimits, connect
from llmgw.store.store import Store
from tests.factories import user_key
from tests.fakes.provider import FakeProvider, GatewayRig
from tests.support.redis_server import RedisServer


def key_with(**limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"limits": Limits(**limits)})


def minted(minter: ApiKey, **limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"limits": Limits(**limits), "minted_by": minter.id})


def shared(redis_server: RedisServer, monotonic: Callable[[], float] = time.monotonic,
           **over: object) -> SharedLimits:
    made = connect(LimitsSettings(redis_url=redis_server.url, **over),  # type: ignore[arg-type]
                   monotonic)
    assert made is not None
    return made


@pytest.fixture
async def servers(redis_server: RedisServer, clock: FakeClock) -> AsyncIterator[list[Limiter]]:
    """Four limiters as four processes (two servers of two workers) of one install, each with
    counts of its own and the one Redis (a deadline a loaded test machine always meets: these
    tests are about exactness; the deadline has its own)."""
    made = [Limiter(None, clock.now, shared=shared(redis_server, redis_timeout_ms=2000))
            for _ in range(4)]
    yield made
    for limiter in made:
        assert limiter.shared is not None
        await limiter.shared.close()


async def burst(limiters: list[Limiter], key: ApiKey, n: int, reserve: int = 0,
                keys: KeyCache | None = None) -> list[Ticket]:
    """`n` concurrent admissions spread over `limiters`; the tickets of those admitted."""
    async def one(i: int) -> Ticket | None:
        try:
            return await limiters[i % len(limiters)].admit_shared(key, reserve)
        except RateLimited:
            return None
    return [t for t in await asyncio.gather(*(one(i) for i in range(n))) if t is not None]


async def test_a_concurrent_burst_over_four_processes_admits_exactly_the_rpm(
        servers: list[Limiter]) -> None:
    key = key_with(rpm=20)
    assert len(await burst(servers, key, 60)) == 20


async def test_concurrency_never_passes_its_limit_and_a_settled_slot_is_free_everywhere(
        servers: list[Limiter]) -> None:
    key = key_with(concurrent=3)
    held = await burst(servers, key, 10)
    assert len(held) == 3
    with pytest.raises(RateLimited) as caught:
        await servers[3].admit_shared(key, 0)
    assert caught.value.code == "rate_limit_concurrent"
    held[0].settle(5)
    await landed(servers)  # settling runs off the request's way: one round trip
    assert len(await burst(servers[3:], key, 1)) == 1  # the freed slot, free in another process


async def test_a_family_shares_its_minters_rpm_across_processes(
        servers: list[Limiter], clock: FakeClock) -> None:
    minter = key_with(rpm=6)
    children = [minted(minter) for _ in range(3)]
    cache = KeyCache(b"", [minter, *children])
    for limiter in servers:
        limiter.keys = lambda: cache
    tickets = await asyncio.gather(*(burst(servers, child, 6) for child in children))
    assert sum(len(t) for t in tickets) == 6  # not 12, nor 18


async def test_keys_a_team_admin_mints_share_its_rpm_across_processes(
        servers: list[Limiter]) -> None:
    team = Team(name="t")
    lead = key_with(rpm=6).model_copy(update={"team": "t", "team_id": team.id, "team_admin": True})
    children = [minted(lead).model_copy(update={"team": "t", "team_id": team.id})
                for _ in range(3)]
    cache = KeyCache(b"", [lead, *children], [team])
    for limiter in servers:
        limiter.keys = lambda: cache
    tickets = await asyncio.gather(*(burst(servers, child, 6) for child in children))
    assert sum(len(t) for t in tickets) == 6  # the team admin's rpm, not each minted key's


async def test_a_team_made_again_under_a_removed_ones_name_counts_from_nothing_in_redis(
        servers: list[Limiter]) -> None:
    old = Team(name="t", limits=Limits(rpm=4))
    old_key = key_with().model_copy(update={"team": "t", "team_id": old.id})
    old_cache = KeyCache(b"", [old_key], [old])
    for limiter in servers:
        limiter.keys = lambda: old_cache
    assert len(await burst(servers, old_key, 8)) == 4

    new = Team(name="t", limits=Limits(rpm=4))
    new_key = key_with().model_copy(update={"team": "t", "team_id": new.id})
    new_cache = KeyCache(b"", [new_key], [new])
    for limiter in servers:
        limiter.keys = lambda: new_cache
    assert len(await burst(servers, new_key, 8)) == 4  # the new team's whole minute
    assert (await servers[0].live(new.limiter_id)).requests_this_minute == 4


async def test_a_day_budget_is_overrun_by_at_most_one_reservation(servers: list[Limiter]) -> None:
    key = key_with(tokens_per_day=1000)
    spent = 0
    for _ in range(5):  # rounds of concurrent requests, each using what it reserved
        tickets = await burst(servers, key, 8, reserve=100)
        for t in tickets:
            t.settle(100)
            spent += 100
        await landed(servers)
    assert 1000 <= spent <= 1000 + 100
    with pytest.raises(RateLimited) as caught:
        await servers[0].admit_shared(key, 100)
    assert caught.value.code == "budget_exceeded"


async def landed(limiters: list[Limiter]) -> None:
    """Once every settlement the limiters sent has reached Redis: each connection keeps its
    commands in order, so a PING answered on it comes after them."""
    for limiter in limiters:
        assert limiter.shared is not None
        await asyncio.sleep(0)  # the loop turn's settlements are written
        await limiter.shared.pipe.call("PING")


@asynccontextmanager
async def limiter_on(redis_server: RedisServer, clock: FakeClock,
                     **over: object) -> AsyncIterator[tuple[Limiter, SharedLimits]]:
    """One process's limiter on the test's Redis, with `[limits]` settings `over`; the pause
    after a failure runs on `clock`."""
    made = shared(redis_server, clock.monotonic, **over)
    try:
        yield Limiter(None, clock.now, shared=made), made
    finally:
        await made.close()


async def test_a_crashed_processs_holds_expire_with_their_lease(
        redis_server: RedisServer, clock: FakeClock) -> None:
    key = key_with(concurrent=1)
    async with limiter_on(redis_server, clock, lease_s=0.3) as (crashed, crashed_store), \
            limiter_on(redis_server, clock, lease_s=0.3) as (other, _):
        await crashed.admit_shared(key, 0)
        await crashed_store.close()  # its process dies: never settled, never renewed
        with pytest.raises(RateLimited):
            await other.admit_shared(key, 0)
        await asyncio.sleep(0.4)  # Redis' own clock runs the lease out: nothing to await here
        (await other.admit_shared(key, 0)).settle(0)


async def test_an_admission_whose_client_left_while_redis_answered_holds_no_slot(
        redis_server: RedisServer, clock: FakeClock) -> None:
    key = key_with(concurrent=1)
    async with limiter_on(redis_server, clock) as (limiter, _):
        asking = asyncio.ensure_future(limiter.admit_shared(key, 0))
        await asyncio.sleep(0)  # sent to Redis, which admits it
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        # Its slot was given back as soon as Redis' answer came: the next one gets it.
        (await limiter.admit_shared(key, 0)).settle(0)


async def test_a_burst_admitted_in_one_call_is_judged_request_by_request(
        redis_server: RedisServer, clock: FakeClock) -> None:
    async with limiter_on(redis_server, clock) as (limiter, _):
        first = await limiter.admit_shared(key_with(), 0)  # connected; the next ones batch up
        key = key_with(concurrent=2)
        answers = await asyncio.gather(*(limiter.admit_shared(key, 0) for _ in range(5)),
                                       return_exceptions=True)
        assert sum(isinstance(a, Ticket) for a in answers) == 2
        refused = [a for a in answers if isinstance(a, RateLimited)]
        assert len(refused) == 3 and "2 requests in flight" in str(refused[0])
        first.settle(0)


async def test_a_running_requests_hold_outlives_its_lease_while_its_process_lives(
        redis_server: RedisServer, clock: FakeClock) -> None:
    key = key_with(concurrent=1)
    async with limiter_on(redis_server, clock, lease_s=0.3) as (running, _), \
            limiter_on(redis_server, clock, lease_s=0.3) as (other, _):
        ticket = await running.admit_shared(key, 0)
        await asyncio.sleep(0.8)  # more than two leases, on Redis' own clock
        with pytest.raises(RateLimited):  # renewed: still held
            await other.admit_shared(key, 0)
        ticket.settle(0)


async def test_a_paused_redis_falls_back_to_local_counts_within_the_deadline(
        redis_server: RedisServer, clock: FakeClock) -> None:
    key = key_with(rpm=5)
    async with limiter_on(redis_server, clock, redis_timeout_ms=50) as (limiter, store):
        for _ in range(3):
            await limiter.admit_shared(key, 0)
        redis_server.pause()
        try:
            started = time.monotonic()
            await limiter.admit_shared(key, 0)  # admitted from this process's counts
            assert time.monotonic() - started < 0.5
            assert store.degraded
            await limiter.admit_shared(key, 0)  # the fifth, counted locally without waiting
            with pytest.raises(RateLimited):  # local counts hold the limit meanwhile
                await limiter.admit_shared(key, 0)
        finally:
            redis_server.resume()


async def test_closed_mode_refuses_with_503_while_redis_is_down(
        redis_server: RedisServer, clock: FakeClock) -> None:
    async with limiter_on(redis_server, clock, on_redis_error="closed") as (limiter, _):
        redis_server.kill()
        with pytest.raises(LimitsUnavailable) as caught:
            await limiter.admit_shared(key_with(rpm=5), 0)
        assert caught.value.status == 503 and caught.value.code == "limits_unavailable"


async def test_closed_mode_answers_each_dialect_with_its_503_and_no_upstream_call(
        redis_server: RedisServer, store: Store) -> None:
    provider = await FakeProvider().start()
    made = shared(redis_server, on_redis_error="closed", redis_timeout_ms=100)
    rig = await GatewayRig(provider, store, limits=Limits(rpm=100), shared=made).start()
    try:
        redis_server.kill()
        with pytest.raises(openai.APIStatusError) as chat:
            await rig.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
        assert chat.value.status_code == 503
        assert chat.value.body["code"] == "limits_unavailable"  # type: ignore[index]
        assert chat.value.response.headers["Retry-After"] == "1"
        with pytest.raises(anthropic.APIStatusError) as messages:
            await rig.anthropic().messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert messages.value.status_code == 503
        assert messages.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        assert provider.requests == []
    finally:
        await rig.close()
        await made.close()
        await provider.close()


async def test_after_redis_restarts_empty_the_counts_are_seeded_from_what_the_server_knows(
        redis_server: RedisServer, clock: FakeClock) -> None:
    key = key_with(rpm=20)
    async with limiter_on(redis_server, clock, redis_timeout_ms=2000) as (limiter, store):
        assert len(await burst([limiter], key, 15)) == 15
        redis_server.kill()
        redis_server.start()  # empty: no persistence
        # The first request finds the old connection gone (and is admitted from this
        # process's counts), then Redis is left alone for a second.
        first = len(await burst([limiter], key, 1))
        clock.advance(1.1)
        # Redis' lost count is raised to what this process knows: 20 in all, not 15 + 20.
        assert first + len(await burst([limiter], key, 20)) == 5
        assert not store.degraded


async def test_live_counts_come_from_redis_for_the_whole_install(servers: list[Limiter]) -> None:
    key = key_with(rpm=100, tokens_per_day=10_000)
    held = [await servers[i].admit_shared(key, 10) for i in range(3)]
    held[0].settle(4)
    await landed(servers[:1])
    live = await servers[3].live(key.id)  # a process that admitted none of them
    assert (live.source, live.requests_this_minute, live.in_flight) == ("redis", 3, 2)
    assert live.tokens_this_minute == 24 and live.tokens_today == 4


async def test_live_counts_without_redis_are_this_servers(clock: FakeClock) -> None:
    limiter = Limiter(None, clock.now)
    key = key_with(rpm=100, tokens_per_day=10_000)
    first = limiter.admit(key, 10)
    limiter.admit(key, 10)
    first.settle(4)
    live = await limiter.live(key.id)
    assert (live.source, live.requests_this_minute, live.tokens_this_minute, live.in_flight,
            live.tokens_today) == ("this server", 2, 14, 1, 4)
