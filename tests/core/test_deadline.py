"""A moving deadline on one timer: it expires once, at the deadline last armed, never early."""

from __future__ import annotations

import asyncio
from typing import cast

from llmgw.core.deadline import Deadline
from tests.fakes.timers import ManualTimers


def deadline_on(clock: ManualTimers) -> tuple[Deadline, list[float], asyncio.AbstractEventLoop]:
    expired: list[float] = []
    return Deadline(lambda: expired.append(clock.now)), expired, cast(asyncio.AbstractEventLoop,
                                                                       clock)


async def test_a_later_deadline_keeps_the_timer_and_expires_at_its_own_time() -> None:
    clock = ManualTimers()
    deadline, expired, loop = deadline_on(clock)
    deadline.arm(loop, 10.0)
    clock.advance(4.0)
    deadline.arm(loop, 14.0)
    assert clock.pending == 1
    clock.advance(13.0)
    assert expired == []
    clock.advance(20.0)
    assert expired == [14.0]


async def test_a_sooner_deadline_moves_the_timer_and_a_disarmed_one_never_expires() -> None:
    clock = ManualTimers()
    deadline, expired, loop = deadline_on(clock)
    deadline.arm(loop, 30.0)
    deadline.arm(loop, 2.0)
    clock.advance(5.0)
    assert expired == [2.0]
    deadline.arm(loop, 8.0)
    deadline.disarm()
    clock.advance(60.0)
    assert expired == [2.0] and clock.pending == 0
    deadline.arm(loop, 70.0)
    deadline.cancel()
    assert clock.pending == 0
