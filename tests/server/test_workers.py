"""The supervision plan of a server's extra workers: who starts when, with plain data and a
fake clock; and a worker's wake of the main process, between real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from llmgw.server.workers import (
    MAX_DELAY_S,
    STABLE_S,
    WAKE_SIGNAL,
    Slot,
    exited,
    ignore_wakes,
    is_worker_row,
    listen_for_wakes,
    plan,
    restart_delay,
    wake_main,
    worker_row,
)


def test_every_worker_starts_at_once_at_first() -> None:
    assert plan([Slot(1), Slot(2), Slot(3)], now=100.0) == ([1, 2, 3], None)


def test_running_workers_are_left_alone() -> None:
    assert plan([Slot(1, running=True, started_at=0.0)], now=100.0) == ([], None)


def test_a_worker_that_dies_after_running_a_while_starts_again_at_once() -> None:
    slot = exited(Slot(1, running=True, started_at=0.0, failures=3), now=STABLE_S + 1)
    assert slot.failures == 1 and not slot.running
    assert plan([slot], now=STABLE_S + 1) == ([1], None)


def test_a_worker_that_keeps_dying_at_start_waits_longer_each_time() -> None:
    slot, now = Slot(1, running=True, started_at=0.0), 0.0
    delays = []
    for _ in range(8):
        now += 0.5  # it dies half a second after each start
        slot = exited(slot, now)
        delays.append(restart_delay(slot.failures))
        start, wake = plan([slot], now)
        if delays[-1]:
            assert start == [] and wake == now + delays[-1]
            now = wake
        assert plan([slot], now)[0] == [1]
        slot = Slot(1, running=True, started_at=now, failures=slot.failures)
    assert delays[:4] == [0.0, 1.0, 2.0, 4.0]
    assert delays[-1] == MAX_DELAY_S  # capped, never stops trying


def test_the_plan_wakes_for_the_earliest_due_worker() -> None:
    a = Slot(1, exited_at=10.0, failures=3)  # due at 12
    b = Slot(2, exited_at=10.0, failures=4)  # due at 14
    assert plan([a, b], now=11.0) == ([], 12.0)
    assert plan([a, b], now=12.0) == ([1], 14.0)


def test_worker_rows_are_told_from_server_rows() -> None:
    assert is_worker_row(worker_row("host-12", 3))
    assert not is_worker_row("host-12")


async def test_a_workers_wake_reaches_the_main_process_until_its_workers_are_stopped() -> None:
    # This process is the main one; the child, started by it, is the worker.
    looked = asyncio.Event()
    loop = asyncio.get_running_loop()
    listen_for_wakes(loop, looked.set)
    try:
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            "import sys; from llmgw.server.workers import wake_main; wake_main(int(sys.argv[1]))()",
            str(os.getpid()))
        async with asyncio.timeout(30):
            await looked.wait()
            assert await worker.wait() == 0
        ignore_wakes(loop)
        os.kill(os.getpid(), WAKE_SIGNAL)  # a late wake: this process lives on
    finally:
        loop.remove_signal_handler(WAKE_SIGNAL)
        signal.signal(WAKE_SIGNAL, signal.SIG_DFL)


def test_a_worker_wakes_its_main_process_only_while_it_is_its_parent() -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))

    wake_main(4242, parent=lambda: 4242, kill=kill)()
    assert sent == [(4242, WAKE_SIGNAL)]

    # The main process died: the worker now belongs to another parent and the pid may be
    # another process's.
    wake_main(4242, parent=lambda: 1, kill=kill)()
    assert sent == [(4242, WAKE_SIGNAL)]


def test_a_wake_that_finds_the_main_process_gone_is_no_error() -> None:
    def gone(_pid: int, _sig: int) -> None:
        raise ProcessLookupError

    wake_main(4242, parent=lambda: 4242, kill=gone)()
