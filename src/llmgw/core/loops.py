"""The one shape every control loop runs in: a step every interval, or at once when woken."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from llmgw.core.errors import LlmgwError


async def every(
    interval_s: float,
    wake: asyncio.Event,
    step: Callable[[], Awaitable[object]],
    what: str,
    logger: logging.Logger,
) -> None:
    """Run `step` forever; a failing step is logged (our errors as one line, others with the
    traceback) and the loop goes on. Cancellation ends it."""
    while True:
        try:
            await step()
        except LlmgwError as exc:
            logger.warning("%s: %s", what, exc.message)
        except Exception:
            logger.exception("%s failed", what)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), interval_s)
        wake.clear()
