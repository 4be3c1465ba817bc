"""Leader election: the pure plan, two servers on one store, and fenced writes."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from sqlalchemy import insert

from llmgw.control.leader import Act, Elector, Leading, Timing, plan
from llmgw.core.clock import FakeClock
from llmgw.core.errors import StaleEpoch
from llmgw.store.lease_repo import Lease, check_epoch
from llmgw.store.schema import meta
from llmgw.store.store import Store

TIMING = Timing()  # ttl 15 s, renew deadline 10 s, retry 2 s


def lease(holder: str, epoch: int, expires_in_s: float, clock: FakeClock) -> Lease:
    now = clock.now()
    return Lease(holder, epoch, now, now + timedelta(seconds=expires_in_s))


def test_timing_follows_the_rule() -> None:
    with pytest.raises(ValueError, match="ttl > renew deadline > 1.2"):
        Timing(ttl=timedelta(seconds=10), renew_deadline=timedelta(seconds=10))
    with pytest.raises(ValueError):
        Timing(renew_deadline=timedelta(seconds=2), retry=timedelta(seconds=2))


def test_plan() -> None:
    clock = FakeClock()
    now = clock.now()
    assert plan("a", None, None, now, TIMING) == Act.ACQUIRE
    assert plan("a", lease("b", 3, 5, clock), None, now, TIMING) == Act.WAIT
    assert plan("a", lease("b", 3, -1, clock), None, now, TIMING) == Act.ACQUIRE  # expired
    assert plan("a", lease("a", 3, 5, clock), None, now, TIMING) == Act.ACQUIRE  # ours, after a restart
    fresh = Leading(3, now - timedelta(seconds=9))
    assert plan("a", None, fresh, now, TIMING) == Act.RENEW
    stale = Leading(3, now - timedelta(seconds=10))
    assert plan("a", None, stale, now, TIMING) == Act.STEP_DOWN


class Loops:
    """Records the leader loops a server starts and stops."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def elected(self, epoch: int) -> None:
        self.events.append(f"start@{epoch}")

    async def deposed(self) -> None:
        self.events.append("stop")


def two_servers(store: Store, clock: FakeClock) -> tuple[Elector, Loops, Elector, Loops]:
    la, lb = Loops(), Loops()
    a = Elector("a", store.leases, clock, TIMING, la.elected, la.deposed)
    b = Elector("b", store.leases, clock, TIMING, lb.elected, lb.deposed)
    return a, la, b, lb


async def test_one_leader_and_a_takeover_after_the_lease_expires(store: Store) -> None:
    clock = FakeClock()
    a, la, b, lb = two_servers(store, clock)
    assert await a.step() == Act.ACQUIRE and a.epoch == 1
    assert await b.step() == Act.WAIT and b.epoch is None
    for _ in range(5):  # a renews every retry; b keeps waiting
        clock.advance(2)
        assert await a.step() == Act.RENEW
        assert await b.step() == Act.WAIT
    # a stops looking (killed or paused): its lease runs out, b takes over with a new epoch.
    clock.advance(15)
    assert await b.step() == Act.ACQUIRE and b.epoch == 2
    assert la.events == ["start@1"] and lb.events == ["start@2"]


async def test_a_paused_leader_steps_down_and_its_writes_are_refused(store: Store) -> None:
    clock = FakeClock()
    a, la, b, lb = two_servers(store, clock)
    await a.step()
    clock.advance(16)  # SIGSTOP past the TTL
    await b.step()
    assert b.epoch == 2
    # SIGCONT: a's first look is past its renew deadline, so it steps down before acting.
    assert await a.step() == Act.STEP_DOWN
    assert la.events == ["start@1", "stop"] and a.epoch is None
    # And a write it had in flight at epoch 1 is fenced off in its own transaction.
    with pytest.raises(StaleEpoch, match="epoch 1 is stale"), store.engine.begin() as conn:
        check_epoch(conn, "a", 1, clock.now())
        conn.execute(insert(meta).values(key="written-by-a", value=1))
    assert store.leases.get() is not None and store.leases.get().holder == "b"  # type: ignore[union-attr]
    with store.engine.connect() as conn:
        assert conn.execute(meta.select().where(meta.c.key == "written-by-a")).first() is None


async def test_a_renew_that_finds_the_lease_taken_steps_down_at_once(store: Store) -> None:
    clock = FakeClock()
    a, la, b, _ = two_servers(store, clock)
    await a.step()
    clock.advance(9)  # within a's renew deadline, but b's view: pretend the lease expired early
    store.leases.release("a", 1, clock.now())
    await b.step()
    assert await a.step() == Act.RENEW
    assert a.epoch is None and la.events == ["start@1", "stop"]


async def test_a_store_outage_keeps_the_leader_until_the_renew_deadline(store: Store) -> None:
    clock = FakeClock()
    a, la, _, _ = two_servers(store, clock)
    await a.step()

    def down(*_args: object) -> bool:
        raise OSError("database unreachable")

    store.leases.renew = down  # type: ignore[method-assign]
    clock.advance(8)
    assert await a.step() == Act.RENEW and a.epoch == 1  # still leading: deadline not reached
    clock.advance(2)
    assert await a.step() == Act.STEP_DOWN and a.epoch is None
    # Stepped down at 10 s, while the lease still had 5 s to run: never two leaders.
    assert la.events == ["start@1", "stop"]


async def test_a_renew_that_hangs_gives_up_at_the_renew_deadline(store: Store) -> None:
    clock = FakeClock()
    a, la, _, _ = two_servers(store, clock)
    await a.step()
    released = threading.Event()

    def hangs(*_args: object) -> bool:
        released.wait(10)  # a database host that stopped answering
        return True

    store.leases.renew = hangs  # type: ignore[method-assign]
    # 9.9 s after the last renewal, 0.1 s of the renew deadline is left: the step returns then,
    # not when the call would have.
    clock.advance(9.9)
    try:
        async with asyncio.timeout(5):
            assert await a.step() == Act.RENEW
        clock.advance(0.1)
        assert await a.step() == Act.STEP_DOWN
    finally:
        released.set()
    assert la.events == ["start@1", "stop"]


async def test_a_clean_stop_hands_over_without_waiting_for_the_ttl(store: Store) -> None:
    clock = FakeClock()
    a, la, b, _ = two_servers(store, clock)
    await a.step()
    a.timing = Timing(retry=timedelta(seconds=0.01), renew_deadline=timedelta(seconds=10))
    import asyncio

    task = asyncio.create_task(a.run())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task})
    assert la.events[-1] == "stop"
    assert await b.step() == Act.ACQUIRE and b.epoch == 2
