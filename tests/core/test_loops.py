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
