"""Per-key limits: rpm and tpm per clock minute, requests in flight, daily and monthly budgets,
default limits, and two servers sharing their counts through one store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limits import Limiter, Ticket, reserve_estimate
from llmgw.gateway.usage import Tokens, UsageMeter
from llmgw.store.store import Store
from tests.factories import user_key

MODEL = "gemma3-270m"


def key_with(**limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"limits": Limits(**limits)})


def admit_all(limiter: Limiter, key: ApiKey, n: int, reserve: int = 0) -> list[Ticket]:
    return [limiter.admit(key, reserve) for _ in range(n)]


def refused(limiter: Limiter, key: ApiKey, reserve: int = 0) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        limiter.admit(key, reserve)
    return caught.value


def admitted_until_refused(limiter: Limiter, key: ApiKey, most: int = 1000) -> int:
    for n in range(most):
        try:
            limiter.admit(key, 0)
        except RateLimited:
            return n
    return most


# --- requests per minute -----------------------------------------------------------------------


def test_the_61st_request_in_a_minute_is_refused_until_the_next_minute(
    store: Store, clock: FakeClock
) -> None:
    limiter = Limiter(store, clock.now)
    key = key_with(rpm=60)
    admit_all(limiter, key, 60)

    exc = refused(limiter, key)
    assert exc.status == 429
    assert exc.type == "rate_limit_error"
    assert exc.code == "rate_limit_rpm"
    assert exc.retry_after_s == 45  # 00:00:15 -> the window ends at 00:01:00
    assert "60 requests per minute" in exc.message and key.label in exc.message

    clock.advance(44)  # 00:00:59: still this minute, one second to go
    assert refused(limiter, key).retry_after_s == 1

    clock.advance(1)  # 00:01:00: a new window
    admit_all(limiter, key, 60)
    assert refused(limiter, key).retry_after_s == 60


def test_each_key_has_its_own_window(store: Store, clock: FakeClock) -> None:
    limiter = Limiter(store, clock.now)
    a, b = key_with(rpm=2), key_with(rpm=2)
    admit_all(limiter, a, 2)
    refused(limiter, a)
    admit_all(limiter, b, 2)


# --- tokens per minute -------------------------------------------------------------------------


def test_tpm_counts_reservations_and_settlement_frees_what_was_not_used(
    store: Store, clock: FakeClock
) -> None:
    limiter = Limiter(store, clock.now)
    key = key_with(tpm=1000)
    first = limiter.admit(key, 600)

    exc = refused(limiter, key, 600)  # 600 reserved + 600 more > 1000
    assert exc.status == 429 and exc.code == "rate_limit_tpm" and exc.retry_after_s == 45

    first.settle(100)  # it used 100 of its 600: 900 are free again
    second = limiter.admit(key, 600)
    limiter.admit(key, 300)  # 100 + 600 + 300 = 1000: exactly at the limit
    refused(limiter, key, 1)

    second.settle(700)  # used more than it reserved: the window holds 100 + 700 + 300
    refused(limiter, key, 1)
    clock.advance(45)
    limiter.admit(key, 1000)


def test_a_request_larger_than_tpm_is_admitted_into_an_empty_window(
    store: Store, clock: FakeClock
) -> None:
    # Otherwise it could never run; the next one waits for the window to end.
    limiter = Limiter(store, clock.now)
    key = key_with(tpm=100)
    limiter.admit(key, 5000)
    assert refused(limiter, key, 1).code == "rate_limit_tpm"


def test_the_reservation_is_max_tokens_plus_about_a_token_per_four_bytes() -> None:
    assert reserve_estimate(50, 400) == 150
    assert reserve_estimate(10, 3) == 11
    assert reserve_estimate(None, 0) == 256
    assert reserve_estimate(None, 8) == 258


# --- requests in flight ------------------------------------------------------------------------


def test_concurrent_limit_and_settle_releases_the_slot(store: Store, clock: FakeClock) -> None:
    limiter = Limiter(store, clock.now)
    key = key_with(concurrent=2)
    first, _second = admit_all(limiter, key, 2)

    exc = refused(limiter, key)
    assert exc.status == 429 and exc.code == "rate_limit_concurrent" and exc.retry_after_s == 1

    first.settle(10)
    third = limiter.admit(key, 0)
    first.settle(10)  # settling twice frees nothing more
    refused(limiter, key)
    third.settle(0)
    limiter.admit(key, 0)


# --- token budgets -----------------------------------------------------------------------------


async def test_a_spent_daily_budget_is_refused_until_midnight_utc(store: Store) -> None:
    clock = FakeClock(datetime(2026, 3, 10, 18, 30, tzinfo=UTC))
    limiter = Limiter(store, clock.now)
    meter = UsageMeter(store, clock.now)
    key = key_with(tokens_per_day=1000)

    def use(tokens: int) -> None:
        # What Gateway.forward does when a request ends: settle the ticket, record the usage.
        ticket = limiter.admit(key, 10)
        ticket.settle(tokens)
        meter.record(key.id, MODEL, Tokens(tokens // 2, tokens - tokens // 2), error=False,
                     blocked=False)

    use(600)
    use(399)
    use(1)  # admitted at 999 spent: the budget is checked before, not after, a request

    exc = refused(limiter, key)
    assert exc.status == 429 and exc.code == "budget_exceeded"
    assert exc.retry_after_s == 5 * 3600 + 30 * 60  # 18:30 -> midnight UTC
    assert "1000 tokens for today" in exc.message

    # A sync moves the spend from memory into the usage table: still spent today.
    await limiter.sync(meter.flush)
    assert refused(limiter, key).code == "budget_exceeded"

    clock.advance(exc.retry_after_s)  # 00:00 UTC the next day
    await limiter.sync(meter.flush)
    use(500)


def test_a_spent_monthly_budget_says_to_retry_when_the_month_ends(store: Store) -> None:
    clock = FakeClock(datetime(2026, 1, 30, 12, 0, tzinfo=UTC))
    limiter = Limiter(store, clock.now)
    key = key_with(tokens_per_month=100)
    limiter.admit(key, 0).settle(100)

    exc = refused(limiter, key)
    assert exc.code == "budget_exceeded" and "this month" in exc.message
    # Retrying at the next midnight (what it says today) is refused again: the budget comes
    # back on 1 February, 36 hours from now.
    assert exc.retry_after_s == int(
        (datetime(2026, 2, 1, tzinfo=UTC) - clock.now()).total_seconds()
    )


# --- default limits ----------------------------------------------------------------------------


def test_default_limits_apply_where_the_key_sets_none(store: Store, clock: FakeClock) -> None:
    default = Limits(rpm=2, concurrent=10)
    limiter = Limiter(store, clock.now, lambda: default)
    bare = key_with()
    own_rpm = key_with(rpm=5)
    own_tpm = key_with(tpm=10_000)

    assert admitted_until_refused(limiter, bare) == 2
    assert admitted_until_refused(limiter, own_rpm) == 5  # its own rpm, not the default's
    assert admitted_until_refused(limiter, own_tpm) == 2  # sets tpm only: the default rpm holds
    assert limiter.limits_for(own_tpm) == Limits(rpm=2, tpm=10_000, concurrent=10)


def test_default_limits_are_read_on_every_admission(store: Store, clock: FakeClock) -> None:
    current = Limits()
    limiter = Limiter(store, clock.now, lambda: current)
    key = key_with()
    admit_all(limiter, key, 3)
    current = Limits(rpm=3)  # an operator sets a default; the snapshot changes
    assert refused(limiter, key).code == "rate_limit_rpm"


# --- two servers, one store --------------------------------------------------------------------


async def test_after_sync_each_server_sees_the_others_requests(store: Store, clock: FakeClock) -> None:
    a, b = Limiter(store, clock.now), Limiter(store, clock.now)
    key = key_with(rpm=60)
    admit_all(a, key, 30)
    admit_all(b, key, 20)
    # Before a sync each admits against its own counts only.
    await a.sync()
    await b.sync()  # b now sees a's 30 and its own 20
    await a.sync()  # a now sees b's 20 too
    assert admitted_until_refused(a, key) == 10
    await a.sync()
    await b.sync()
    assert admitted_until_refused(b, key) == 0

    clock.advance(45)  # the next minute: both windows are empty again
    await a.sync()
    await b.sync()
    assert admitted_until_refused(a, key) == 60


async def test_tokens_settled_on_one_server_count_on_the_other_after_sync(
    store: Store, clock: FakeClock
) -> None:
    a, b = Limiter(store, clock.now), Limiter(store, clock.now)
    key = key_with(tpm=1000)
    a.admit(key, 500).settle(900)
    await a.sync()
    await b.sync()
    assert refused(b, key, 200).code == "rate_limit_tpm"
    b.admit(key, 100)


@pytest.mark.parametrize(
    ("per_interval", "measured"),
    [
        # Measured (rpm 60, sync every interval): what a and b admitted, and the overshoot.
        (3, (33, 30, 3)),
        (8, (36, 32, 8)),
        (25, (50, 35, 25)),
        (60, (60, 60, 60)),  # a whole minute's worth in one interval: each admits the limit
    ],
)
async def test_overshoot_of_two_servers_between_syncs_is_bounded_by_one_servers_interval(
    store: Store, clock: FakeClock, per_interval: int, measured: tuple[int, int, int]
) -> None:
    """Both servers take traffic at once and sync every interval (1 s live, ACCOUNTING_S).

    Each server is offered `per_interval` requests per interval and admits what its view
    allows; then both sync, one after the other, as their loops would.
    """
    rpm = 60
    a, b = Limiter(store, clock.now), Limiter(store, clock.now)
    key = key_with(rpm=rpm)
    admitted = {"a": 0, "b": 0}
    for _ in range(20):  # 20 intervals of one second, all inside one clock minute
        for name, limiter in (("a", a), ("b", b)):
            for _ in range(per_interval):
                try:
                    limiter.admit(key, 0)
                    admitted[name] += 1
                except RateLimited:
                    break
        await a.sync()
        await b.sync()
        clock.advance(1)
    overshoot = admitted["a"] + admitted["b"] - rpm
    # With 8 per interval: a syncs before b, so a's view always lacks b's last interval. Each
    # admitted 8 in intervals 0-3 (64 in all); in interval 4 a saw 56 and admitted 4 more:
    # 68 admitted, an overshoot of 8, exactly what b admits in one interval. Never above that.
    assert (admitted["a"], admitted["b"], overshoot) == measured
    assert 0 <= overshoot <= min(per_interval, rpm)
    # Once synced, neither admits anything more this minute.
    assert admitted_until_refused(a, key) == 0
    assert admitted_until_refused(b, key) == 0


async def test_requests_admitted_while_a_sync_is_writing_still_see_this_servers_counts(
    store: Store, clock: FakeClock
) -> None:
    # Live, `sync` awaits the usage flush and then the store in a worker thread: requests keep
    # arriving meanwhile. The counts being written must stay visible until the shared totals
    # that include them are read back, or the server forgets its own recent requests and
    # admits past its limit during every sync.
    limiter = Limiter(store, clock.now)
    key = key_with(rpm=3)
    admit_all(limiter, key, 3)
    during: list[str] = []

    async def flush_usage() -> None:  # a request arriving while the sync awaits the store
        try:
            limiter.admit(key, 0)
            during.append("admitted")
        except RateLimited as exc:
            during.append(exc.code or "")

    await limiter.sync(flush_usage)
    assert during == ["rate_limit_rpm"]
    assert admitted_until_refused(limiter, key) == 0


async def test_a_failed_sync_keeps_the_counts_in_memory(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = Limiter(store, clock.now)
    key = key_with(rpm=5)
    admit_all(limiter, key, 4)

    def down(*_: object) -> None:
        raise RuntimeError("database is down")

    monkeypatch.setattr(store.usage, "add_rates", down)
    with pytest.raises(RuntimeError):
        await limiter.sync()
    assert admitted_until_refused(limiter, key) == 1  # the 4 are still counted

    monkeypatch.undo()
    await limiter.sync()
    assert admitted_until_refused(limiter, key) == 0
    assert store.usage.rates([int(clock.now().timestamp()) // 60]) == {
        (key.id, int(clock.now().timestamp()) // 60): (5, 0)
    }


# --- budgets reserve what requests in flight may use --------------------------------------------


def test_requests_in_flight_hold_their_reservation_against_the_budget(
    store: Store, clock: FakeClock
) -> None:
    limiter = Limiter(store, clock.now)
    key = key_with(tokens_per_day=100)
    first = [limiter.admit(key, 30) for _ in range(3)]  # 90 reserved: each fits
    exc = refused(limiter, key, 30)  # 120 would not, and requests are in flight
    assert exc.code == "budget_exceeded" and "100 tokens for today" in exc.message
    limiter.admit(key, 10)  # 100: exactly the budget

    for ticket in first:
        ticket.settle(12)  # each used 12 of its 30: 36 spent, 10 still reserved
    limiter.admit(key, 54)  # 36 + 10 + 54 = 100
    refused(limiter, key, 1)


def test_past_the_point_where_estimates_fit_requests_run_one_at_a_time(
    store: Store, clock: FakeClock
) -> None:
    limiter = Limiter(store, clock.now)
    key = key_with(tokens_per_day=100)
    alone = limiter.admit(key, 500)  # larger than the budget, but nothing else is in flight
    refused(limiter, key, 1)  # ...so nothing else runs beside it
    alone.settle(90)
    last = limiter.admit(key, 500)  # 10 left: one more may use them, alone
    refused(limiter, key, 1)
    last.settle(25)  # it used 25: the budget is overrun by 15, less than that one request
    assert refused(limiter, key, 1).code == "budget_exceeded"


# --- a family of minted keys shares its first key's limits -------------------------------------


def family(**limits: int) -> tuple[KeyCache, ApiKey, ApiKey, ApiKey, ApiKey]:
    """A user key with `limits`, the key it minted, that key's child, and an unrelated key."""
    parent = key_with(**limits)
    child = key_with(**limits).model_copy(update={"minted_by": parent.id})
    grandchild = key_with(**limits).model_copy(update={"minted_by": child.id})
    other = key_with(**limits)
    return KeyCache(b"", [parent, child, grandchild, other]), parent, child, grandchild, other


def test_a_family_shares_one_rpm(store: Store, clock: FakeClock) -> None:
    cache, parent, child, grandchild, other = family(rpm=5)
    limiter = Limiter(store, clock.now, keys=lambda: cache)
    for key in (grandchild, child, grandchild, parent, child):
        limiter.admit(key, 0)
    for key in (parent, child, grandchild):
        exc = refused(limiter, key)
        assert exc.code == "rate_limit_rpm"
    assert parent.label in refused(limiter, grandchild).message
    assert admitted_until_refused(limiter, other) == 5  # another family has its own


def test_a_childs_own_tighter_limit_holds_beside_its_familys(store: Store, clock: FakeClock) -> None:
    _, parent, child, _, _ = family(concurrent=2)
    child = child.model_copy(update={"limits": Limits(concurrent=1)})
    sibling = key_with(concurrent=2).model_copy(update={"minted_by": parent.id})
    cache = KeyCache(b"", [parent, child, sibling])
    limiter = Limiter(store, clock.now, keys=lambda: cache)
    limiter.admit(child, 0)
    assert refused(limiter, child).code == "rate_limit_concurrent"  # its own 1
    limiter.admit(parent, 0)
    exc = refused(limiter, sibling)  # its own 2 are free, its family's 2 are not
    assert exc.code == "rate_limit_concurrent" and f"{parent.label}'s family" in exc.message


async def test_a_family_shares_one_budget_across_servers(store: Store, clock: FakeClock) -> None:
    cache, parent, child, grandchild, _ = family(tokens_per_day=100)
    a = Limiter(store, clock.now, keys=lambda: cache)
    b = Limiter(store, clock.now, keys=lambda: cache)
    meter = UsageMeter(store, clock.now)
    for key in (child, grandchild):  # spent on server a by two keys of the family
        a.admit(key, 10).settle(50)
        meter.record(key.id, MODEL, Tokens(25, 25), error=False, blocked=False)
    assert refused(a, parent).code == "budget_exceeded"
    b.admit(parent, 0).settle(0)  # before any sync, b knows nothing of a's requests
    await a.sync(meter.flush)
    await b.sync()  # b reads what the family's keys used, not only what the parent did
    for key in (parent, child, grandchild):
        assert refused(b, key).code == "budget_exceeded"
