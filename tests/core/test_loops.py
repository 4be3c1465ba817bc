"""The shape every control loop runs in: a loop being stopped stops, whatever wakes it then."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llmgw.core.loops import every, woken


async def test_a_wait_cancelled_as_its_event_is_set_is_still_cancelled() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(woken(event, 10))
    await asyncio.sleep(0)  # the task is waiting on the event now
    event.set()  # something wakes it (a change) in the very turn it is stopped
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_loop_stopped_while_a_change_wakes_it_stops() -> None:
    wake, passes = asyncio.Event(), []

    async def step() -> None:
        passes.append(len(passes))

    loop = asyncio.create_task(every(10, wake, step, "test loop", logging.getLogger("test")))
    await asyncio.sleep(0)
    wake.set()
    loop.cancel()
    async with asyncio.timeout(5):
        await asyncio.wait({loop})
    assert loop.cancelled() and passes == [0]


async def test_a_wait_says_whether_its_event_came() -> None:
    event = asyncio.Event()
    assert await woken(event, 0.01) is False
    event.set()
    assert await woken(event, 10) is True


async def test_a_loop_asks_for_its_interval_after_every_step() -> None:
    wake, third, passes, asked = asyncio.Event(), asyncio.Event(), [], []

    async def step() -> None:
        passes.append(len(passes))
        if len(passes) == 3:
            third.set()

    def interval() -> float:
        asked.append(len(passes))
        return 0.0 if len(passes) < 3 else 3600.0  # the step decides: twice at once, then later

    loop = asyncio.create_task(every(interval, wake, step, "test loop", logging.getLogger("test")))
    try:
        async with asyncio.timeout(5):
            await third.wait()
        assert passes == [0, 1, 2] and asked == [1, 2, 3]
    finally:
        loop.cancel()
        await asyncio.wait({loop})
