"""A team's limits and budgets on top of each key's, in the limiter: bursts at the edge, and two
servers sharing one PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits, Team
from llmgw.gateway.auth import KeyCache, team_allows
from llmgw.gateway.limits import Limiter
from llmgw.gateway.usage import Tokens, UsageMeter
from llmgw.store.store import Store
from tests.factories import NOW, user_key
from tests.support.pg import fresh_database

MODEL = "gemma3-270m"


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    s = Store.open(fresh_database(postgres_url))
    yield s
    s.close()


def member(team: Team | None, **limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"team": team.name if team else None,
                                     "team_id": team.id if team else None,
                                     "limits": Limits(**limits)})


def refused(limiter: Limiter, key: ApiKey, reserve: int = 0) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        limiter.admit(key, reserve)
    return caught.value


def test_a_teams_rpm_holds_on_top_of_each_keys(clock: FakeClock) -> None:
    team = Team(name="research", limits=Limits(rpm=5))
    a, b, outsider = member(team, rpm=4), member(team), member(None)
    cache = KeyCache(b"", [a, b, outsider], [team])
    limiter = Limiter(None, clock.now, keys=lambda: cache)
    for key in (a, a, a, a):
        limiter.admit(key, 0)
    assert refused(limiter, a).code == "rate_limit_rpm"  # its own 4
    limiter.admit(b, 0)  # the team's fifth
    exc = refused(limiter, b)
    assert exc.code == "rate_limit_rpm" and "team research's limit of 5" in exc.message
    for _ in range(10):
        limiter.admit(outsider, 0)  # no team: only its own limits (none)


def test_the_installs_default_limits_are_not_a_teams(clock: FakeClock) -> None:
    team = Team(name="big", limits=Limits(concurrent=10))
    keys = [member(team) for _ in range(5)]
    cache = KeyCache(b"", keys, [team])
    limiter = Limiter(None, clock.now, default=lambda: Limits(concurrent=2), keys=lambda: cache)
    for key in keys:  # 2 each by default, 10 for the team together
        limiter.admit(key, 0)
        limiter.admit(key, 0)
    assert refused(limiter, keys[0]).code == "rate_limit_concurrent"


def test_keys_minted_beneath_a_team_key_count_against_the_team(clock: FakeClock) -> None:
    team = Team(name="t", limits=Limits(concurrent=2))
    parent = member(team)
    child = member(team).model_copy(update={"minted_by": parent.id})
    cache = KeyCache(b"", [parent, child], [team])
    limiter = Limiter(None, clock.now, keys=lambda: cache)
    limiter.admit(parent, 0)
    limiter.admit(child, 0)
    exc = refused(limiter, parent)
    assert exc.code == "rate_limit_concurrent" and "2 requests of team t in flight" in exc.message


def test_keys_a_team_admin_mints_share_its_limits(clock: FakeClock) -> None:
    """A team admin key is a minter like any other: the keys it mints count against its own
    limits and its team's, so a burst from several of them gets exactly the team admin's."""
    team = Team(name="t")
    lead = member(team, concurrent=3).model_copy(update={"team_admin": True})
    keys = [member(team).model_copy(update={"minted_by": lead.id}) for _ in range(4)]
    cache = KeyCache(b"", [lead, *keys], [team])
    assert [k.id for k in cache.chain(keys[0])] == [keys[0].id, lead.id, team.limiter_id]
    limiter = Limiter(None, clock.now, keys=lambda: cache)
    admitted = 0
    for i in range(12):
        try:
            limiter.admit(keys[i % 4], 0)
            admitted += 1
        except RateLimited as exc:
            assert exc.code == "rate_limit_concurrent"
    assert admitted == 3


def test_a_team_made_again_under_a_removed_ones_name_counts_from_nothing(
        clock: FakeClock) -> None:
    """A team removed and made again under its name is another team: the limiter counts it
    afresh, and the old team's keys are none of its members."""
    old = Team(name="t", limits=Limits(rpm=2, concurrent=2))
    old_key = member(old)
    limiter = Limiter(None, clock.now, keys=lambda: KeyCache(b"", [old_key], [old]))
    limiter.admit(old_key, 0)
    limiter.admit(old_key, 0)
    assert refused(limiter, old_key).code == "rate_limit_rpm"

    new = Team(name="t", limits=Limits(rpm=2, concurrent=2))
    new_key = member(new)
    cache = KeyCache(b"", [old_key.model_copy(update={"revoked": True}), new_key], [new])
    limiter.keys = lambda: cache
    assert cache.family(new.limiter_id) == (new.limiter_id, new_key.id)
    limiter.admit(new_key, 0)
    limiter.admit(new_key, 0)  # the new team's whole minute and concurrency
    assert refused(limiter, new_key).code == "rate_limit_rpm"
    assert not team_allows(cache, old_key, MODEL)  # its team is gone, whatever has its name


def test_a_team_key_may_call_only_the_teams_models() -> None:
    team = Team(name="t", models=["gemma*"])
    key = member(team)
    cache = KeyCache(b"", [key], [team])
    assert team_allows(cache, key, "gemma3-270m")
    assert not team_allows(cache, key, "gpt-4o")
    gone = KeyCache(b"", [key], [])  # its team was removed: nothing
    assert not team_allows(gone, key, "gemma3-270m")


async def test_a_teams_budget_counts_what_was_counted_under_the_teams_own_id(
        store: Store, clock: FakeClock) -> None:
    """What a team's admins send from the console is counted under the team's own id
    (`person_key`): the team's budget, read back from the usage table, counts it."""
    team = Team(name="t", limits=Limits(tokens_per_day=100))
    key = member(team)
    cache = KeyCache(b"", [key], [team])
    limiter = Limiter(store, clock.now, keys=lambda: cache)
    limiter.admit(key, 0).settle(1)  # the team's budget is now read at every sync
    meter = UsageMeter(store, clock.now)
    meter.record(team.limiter_id, MODEL, Tokens(40, 60), error=False, blocked=False)
    await limiter.sync(meter.flush)
    assert refused(limiter, key).code == "budget_exceeded"


async def test_a_team_budget_at_its_edge_across_two_servers_on_postgresql(
    pg_store: Store, clock: FakeClock,
) -> None:
    """Server a spends the team's day to its edge in a burst; server b, before a sync, admits
    at most what was left at its last sync (the stated tolerance); after both sync, every key of
    the team is refused on both, and keys outside it are not."""
    team = Team(name="research", limits=Limits(tokens_per_day=1000))
    k1, k2, outsider = member(team), member(team), member(None)
    cache = KeyCache(b"", [k1, k2, outsider], [team])
    a = Limiter(pg_store, clock.now, keys=lambda: cache)
    b = Limiter(pg_store, clock.now, keys=lambda: cache)
    meter_a, meter_b = UsageMeter(pg_store, clock.now), UsageMeter(pg_store, clock.now)

    # A burst of 100-token reservations from both keys on a: 10 fit, the 11th does not.
    burst = [a.admit(k1 if i % 2 else k2, 100) for i in range(10)]
    exc = refused(a, k1, 100)
    assert exc.code == "budget_exceeded" and "team research's" in exc.message
    assert exc.retry_after_s == 1  # refused for reservations in flight: they settle soon
    for i, ticket in enumerate(burst[:-1]):
        ticket.settle(99)  # each used one token less than it reserved
        meter_a.record((k1 if i % 2 else k2).id, MODEL, Tokens(49, 50), error=False, blocked=False)
    burst[-1].settle(99)
    meter_a.record(k2.id, MODEL, Tokens(49, 50), error=False, blocked=False)
    # 990 spent: 10 left, so one request runs alone on the rest, then none.
    last = a.admit(k1, 100)
    assert refused(a, k2, 1).code == "budget_exceeded"
    last.settle(20)  # past the edge by what one request used beyond what was left
    meter_a.record(k1.id, MODEL, Tokens(10, 10), error=False, blocked=False)
    exc = refused(a, k2, 1)
    assert exc.retry_after_s == 86400 - 15  # spent: until midnight UTC

    # b has not synced: it admits the team up to the whole budget it last saw (none spent).
    on_b = b.admit(k2, 100)
    on_b.settle(100)
    meter_b.record(k2.id, MODEL, Tokens(50, 50), error=False, blocked=False)

    await a.sync(meter_a.flush)
    await b.sync(meter_b.flush)
    await a.sync(meter_a.flush)  # a now reads what b wrote
    for server in (a, b):
        for key in (k1, k2):
            assert refused(server, key, 1).code == "budget_exceeded"
        server.admit(outsider, 100).settle(100)
    spent = sum(pg_store.usage.tokens_since([k1.id, k2.id], NOW.strftime("%Y-%m-%d")).values())
    assert spent == 990 + 20 + 100  # over by one request past the edge and what b admitted


async def test_a_teams_rpm_across_two_servers_on_postgresql(pg_store: Store, clock: FakeClock) -> None:
    team = Team(name="ops", limits=Limits(rpm=10))
    keys = [member(team) for _ in range(3)]
    cache = KeyCache(b"", keys, [team])
    a = Limiter(pg_store, clock.now, keys=lambda: cache)
    b = Limiter(pg_store, clock.now, keys=lambda: cache)
    for i in range(6):
        a.admit(keys[i % 3], 0).settle(0)
    await a.sync()
    await b.sync()
    admitted = 0
    for i in range(10):  # a burst on b: only what is left of the team's minute
        try:
            b.admit(keys[i % 3], 0).settle(0)
            admitted += 1
        except RateLimited as exc:
            assert exc.code == "rate_limit_rpm"
    assert admitted == 4
