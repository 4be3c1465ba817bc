"""Requests in flight counted per server: the workers of one server share one table, so a key's
concurrency limit and its reservations hold for the server as a whole."""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from pathlib import Path

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway import inflight
from llmgw.gateway.inflight import JudgeSlots, SharedInFlight
from llmgw.gateway.limits import Limiter
from tests.factories import NOW, user_key


def key_with(**limits: int) -> ApiKey:
    _, record = user_key()
    return record.model_copy(update={"limits": Limits(**limits)})


def limiters(two_workers: tuple[SharedInFlight, SharedInFlight]) -> tuple[Limiter, Limiter]:
    clock = FakeClock(NOW + timedelta(seconds=15))
    return (Limiter(None, clock.now, flight=two_workers[0]), Limiter(None, clock.now, flight=two_workers[1]))


def test_a_concurrency_limit_holds_across_two_workers(
        two_workers: tuple[SharedInFlight, SharedInFlight]) -> None:
    a, b = limiters(two_workers)
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
        two_workers: tuple[SharedInFlight, SharedInFlight]) -> None:
    a, b = limiters(two_workers)
    key = key_with(tokens_per_day=100)
    held = a.admit(key, 60)
    with pytest.raises(RateLimited) as exc:
        b.admit(key, 60)  # 60 + 60 reserved does not fit in 100 while the first is in flight
    assert exc.value.code == "budget_exceeded"
    held.settle(10)
    b.admit(key, 60)


def test_a_dead_workers_requests_stop_holding_their_slots(
        two_workers: tuple[SharedInFlight, SharedInFlight]) -> None:
    main, worker = two_workers
    a, b = limiters(two_workers)
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
        two_workers: tuple[SharedInFlight, SharedInFlight], monkeypatch: pytest.MonkeyPatch,
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


def test_a_judge_slot_is_held_by_one_worker_at_a_time(
        two_workers: tuple[SharedInFlight, SharedInFlight]) -> None:
    main, worker = JudgeSlots(two_workers[0]), JudgeSlots(two_workers[1])
    assert main.take("judge-r1", 0)
    assert worker.taken("judge-r1", 0) and not worker.take("judge-r1", 0)
    assert worker.take("judge-r1", 1) and not main.take("judge-r1", 1)  # each slot on its own
    main.give("judge-r1", 0)
    assert not worker.taken("judge-r1", 0) and worker.take("judge-r1", 0)


def test_a_dead_workers_judge_slots_are_free_again(
        two_workers: tuple[SharedInFlight, SharedInFlight]) -> None:
    main, worker = JudgeSlots(two_workers[0]), JudgeSlots(two_workers[1])
    assert worker.take("judge-r1", 0)
    two_workers[0].forget(1)  # worker 1 died with its judgment
    assert main.take("judge-r1", 0)
