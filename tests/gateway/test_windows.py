"""Minute windows for a whole server: `rpm` and `tpm` hold exactly across a server's workers,
before and after syncs with the store, and other servers' counts still arrive through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway.inflight import SharedInFlight
from llmgw.gateway.limits import Limiter
from llmgw.gateway.usage import Tokens, UsageMeter
from llmgw.gateway.windows import LocalWindows, SharedWindows
from llmgw.store.store import Store
from tests.factories import user_key


class ServerRig:
    """One server's workers: a limiter each, over the server's shared in-flight table and
    windows, and one store for every server."""

    def __init__(self, run_dir: Path, store: Store, clock: FakeClock, workers: int = 2) -> None:
        run_dir.mkdir()
        self.flights = [SharedInFlight(run_dir / "in-flight", workers, i, create=i == 0)
                        for i in range(workers)]
        self.windows = [SharedWindows(run_dir, workers, i, create=i == 0) for i in range(workers)]
        self.workers = [Limiter(store, clock.now, flight=f, windows=w)
                        for f, w in zip(self.flights, self.windows, strict=True)]

    def close(self) -> None:
        for f, w in zip(self.flights, self.windows, strict=True):
            f.close()
            w.close()


@pytest.fixture
def rigs(tmp_path: Path, store: Store, clock: FakeClock) -> Iterator[list[ServerRig]]:
    made = [ServerRig(tmp_path / "server-a", store, clock), ServerRig(tmp_path / "server-b", store, clock)]
    yield made
    for rig in made:
        rig.close()


def key_with(**limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"limits": Limits(**limits)})


def burst(limiters: list[Limiter], key: ApiKey, n: int, reserve: int = 0) -> int:
    """`n` requests spread over `limiters` in turn; how many were admitted."""
    admitted = 0
    for i in range(n):
        try:
            limiters[i % len(limiters)].admit(key, reserve)
            admitted += 1
        except RateLimited:
            pass
    return admitted


async def test_a_burst_over_two_workers_admits_exactly_the_rpm(rigs: list[ServerRig]) -> None:
    server = rigs[0]
    key = key_with(rpm=20)
    assert burst(server.workers, key, 60) == 20  # not 40: one window for the server


async def test_syncs_in_the_middle_of_a_burst_neither_loosen_nor_tighten_the_limit(
        rigs: list[ServerRig]) -> None:
    server = rigs[0]
    key = key_with(rpm=20)
    admitted = 0
    for _ in range(12):
        admitted += burst(server.workers, key, 5)
        for worker in server.workers:  # each worker writes its part; the server's count stays
            await worker.sync()
    assert admitted == 20


async def test_tokens_per_minute_hold_across_workers_with_settlement(rigs: list[ServerRig]) -> None:
    a, b = rigs[0].workers
    key = key_with(tpm=1000)
    first = a.admit(key, 600)
    with pytest.raises(RateLimited) as caught:
        b.admit(key, 600)  # 600 reserved in the other worker
    assert caught.value.code == "rate_limit_tpm"
    first.settle(100)  # used far less: the rest is free in every worker
    b.admit(key, 600)
    await a.sync()
    await b.sync()
    with pytest.raises(RateLimited):
        a.admit(key, 400)  # 100 + 600 used or reserved, 400 more does not fit


async def test_a_dead_workers_admissions_still_count(rigs: list[ServerRig]) -> None:
    server = rigs[0]
    key = key_with(rpm=20)
    assert burst([server.workers[1]], key, 12) == 12
    server.flights[0].forget(1)  # the server clears a dead worker's requests in flight...
    assert burst([server.workers[0]], key, 30) == 8  # ...not what it admitted this minute


async def test_another_servers_counts_arrive_at_the_sync_and_are_not_counted_twice(
        rigs: list[ServerRig]) -> None:
    a, b = rigs
    key = key_with(rpm=30)
    assert burst(a.workers, key, 10) == 10
    assert burst(b.workers, key, 5) == 5
    for worker in [*b.workers, *a.workers]:  # a's workers read after b's have written
        await worker.sync()
    # Server a: its own 10 now, server b's 5 from the store: 15 left, whichever worker.
    assert burst(a.workers, key, 40) == 15


async def test_a_new_minute_starts_a_new_window_and_an_old_table_is_reused(
        rigs: list[ServerRig], clock: FakeClock) -> None:
    server = rigs[0]
    key = key_with(rpm=5)
    assert burst(server.workers, key, 10) == 5
    clock.advance(60)
    assert burst(server.workers, key, 10) == 5
    clock.advance(60)  # the first minute's table now counts this one: it starts empty
    assert burst(server.workers, key, 10) == 5


def test_one_process_windows_keep_only_the_last_two_minutes() -> None:
    w = LocalWindows()
    w.add("k", 100, 1, 10)
    w.add("k", 101, 2, 20)
    w.add("k", 102, 3, 30)
    assert (w.get("k", 100), w.get("k", 101), w.get("k", 102)) == ((0, 0), (2, 20), (3, 30))
    w.add("k", 99, 5, 5)  # too old to matter: not kept
    assert w.get("k", 99) == (0, 0)


async def test_a_budget_holds_across_workers_before_and_after_their_syncs(
        rigs: list[ServerRig], store: Store, clock: FakeClock) -> None:
    a, b = rigs[0].workers
    meters = {id(a): UsageMeter(store, clock.now), id(b): UsageMeter(store, clock.now)}
    key = key_with(tokens_per_day=100)

    def use(worker: Limiter, tokens: int) -> None:
        worker.admit(key, 10).settle(tokens)  # what the gateway does when a request ends
        meters[id(worker)].record(key.id, "m", Tokens(tokens, 0), error=False, blocked=False)

    use(a, 60)
    held = a.admit(key, 10)  # one request in flight, reserving 10
    # Worker b sees worker a's spend at once, not after the two of them synced: 60 spent, 10
    # reserved, and 50 more does not fit.
    with pytest.raises(RateLimited) as caught:
        b.admit(key, 50)
    assert caught.value.code == "budget_exceeded"
    use(b, 20)
    # Whatever order the workers write their usage in, 80 stay spent: counted in the table or
    # in memory, never in neither, nor twice.
    for step in (a, b, a, b):
        await step.sync(meters[id(step)].flush)
        for worker in (a, b):
            with pytest.raises(RateLimited):
                worker.admit(key, 15)  # 80 + 10 + 15
    held.settle(0)
    for worker in (a, b):
        worker.admit(key, 20).settle(0)  # 80 + 20 fits once nothing else is in flight
