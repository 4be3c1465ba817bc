"""The one shape every control loop runs in: a step every interval, or at once when woken."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from llmgw.core.errors import LlmgwError


async def woken(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for `event` at most `timeout_s`; whether it was set.

    Not `asyncio.wait_for(event.wait(), …)`: on Python 3.11 that returns normally when the event
    is set in the same turn as the waiting task is cancelled, losing the cancellation, so a
    loop that is stopped while something wakes it runs on for ever (and a shutdown waiting for
    it hangs). `asyncio.timeout` keeps the cancellation."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()


async def every(
    interval_s: float | Callable[[], float],
    wake: asyncio.Event,
    step: Callable[[], Awaitable[object]],
    what: str,
    logger: logging.Logger,
) -> None:
    """Run `step` forever, then again after `interval_s` or as soon as `wake` is set; a failing
    step is logged (our errors as one line, others with the traceback) and the loop goes on.
    Cancellation ends it. A callable `interval_s` is asked after each step (a step may decide
    when the next is due)."""
    while True:
        try:
            await step()
        except LlmgwError as exc:
            logger.warning("%s: %s", what, exc.message)
        except Exception:
            logger.exception("%s failed", what)
        await woken(wake, interval_s() if callable(interval_s) else interval_s)
        wake.clear()
