"""Requests in flight counted per server: the workers of one server share one table, so a key's
concurrency limit and its reservations hold for the server as a whole."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway import inflight
from llmgw.gateway.inflight import SharedInFlight
from llmgw.gateway.limits import Limiter
from tests.factories import NOW, user_key


@pytest.fixture
def tables(tmp_path: Path) -> Iterator[tuple[SharedInFlight, SharedInFlight]]:
    main = SharedInFlight(tmp_path / "in-flight", 2, 0, create=True)
    worker = SharedInFlight(tmp_path / "in-flight", 2, 1)
    yield main, worker
    worker.close()
    main.close()


def key_with(**limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"limits": Limits(**limits)})


def limiters(tables: tuple[SharedInFlight, SharedInFlight]) -> tuple[Limiter, Limiter]:
    clock = FakeClock(NOW + timedelta(seconds=15))
    return (Limiter(None, clock.now, flight=tables[0]), Limiter(None, clock.now, flight=tables[1]))


def test_a_concurrency_limit_holds_across_two_workers(
        tables: tuple[SharedInFlight, SharedInFlight]) -> None:
    a, b = limiters(tables)
    key = key_with(concurrent=2)
    first = a.admit(key, 0)
    b.admit(key, 0)

    for limiter in (a, b):
        with pytest.raises(RateLimited) as exc:
            limiter.admit(key, 0)
        assert exc.value.code == "rate_limit_concurrent"

    first.settle(5)  # a slot freed in one worker is free in the other
    b.admit(key, 0)
    with pytest.raises(RateLimited):
        a.admit(key, 0)


def test_reservations_in_flight_hold_the_budget_across_workers(
        tables: tuple[SharedInFlight, SharedInFlight]) -> None:
    a, b = limiters(tables)
    key = key_with(tokens_per_day=100)
    held = a.admit(key, 60)
    with pytest.raises(RateLimited) as exc:
        b.admit(key, 60)  # 60 + 60 reserved does not fit in 100 while the first is in flight
    assert exc.value.code == "budget_exceeded"
    held.settle(10)
    b.admit(key, 60)


def test_a_dead_workers_requests_stop_holding_their_slots(
        tables: tuple[SharedInFlight, SharedInFlight]) -> None:
    main, worker = tables
    a, b = limiters(tables)
    key = key_with(concurrent=1)
    b.admit(key, 40)  # the worker dies with this request in flight
    with pytest.raises(RateLimited):
        a.admit(key, 0)

    main.forget(1)

    assert main.get(key.id) == (0, 0)
    a.admit(key, 0)


def _admit_many(path: str, index: int, key_id: str, n: int) -> None:
    table = SharedInFlight(Path(path), 2, index)
    for _ in range(n):
        with table.held():
            table.add(key_id, 1, 3)
    table.close()


def test_counts_from_two_processes_at_once_add_up(tmp_path: Path) -> None:
    main = SharedInFlight(tmp_path / "in-flight", 2, 0, create=True)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_admit_many, args=(str(tmp_path / "in-flight"), i, "key-x", 2000))
             for i in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert main.get("key-x") == (4000, 12000)
    main.close()


def test_slots_of_idle_keys_are_reused_when_the_table_fills(
        tables: tuple[SharedInFlight, SharedInFlight], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setattr(inflight, "SLOTS", 8)
    table = SharedInFlight(tmp_path / "small", 1, 0, create=True)
    for i in range(8):
        table.add(f"idle-{i}", 1, 1)
        table.add(f"idle-{i}", -1, -1)
    table.add("busy", 1, 5)  # the table is full of idle keys: they make room

    assert table.get("busy") == (1, 5)
    assert table.get("idle-0") == (0, 0)
    table.close()
