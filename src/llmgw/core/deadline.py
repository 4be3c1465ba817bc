"""A deadline that moves often, kept by one timer.

Making and cancelling a timer costs more on uvloop than the bookkeeping of a request around it,
so a connection whose deadline moves with every request keeps one: `arm` moves the deadline, the
timer is rescheduled only when the new deadline comes sooner than it fires, and a timer that
fires before the deadline (it moved on meanwhile) waits on for it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable


class Deadline:
    """Calls `on_expiry` once the deadline last armed passes, unless it was disarmed first."""

    __slots__ = ("_on_expiry", "_timer", "_when")

    def __init__(self, on_expiry: Callable[[], None]) -> None:
        self._on_expiry = on_expiry
        self._when = math.inf
        self._timer: asyncio.TimerHandle | None = None

    def arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Expire at `when` (the loop's time), replacing any deadline armed before."""
        self._when = when
        timer = self._timer
        if timer is None or timer.when() > when:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(when, self._fire, loop)

    def disarm(self) -> None:
        """Nothing is due (a timer still pending fires and finds so)."""
        self._when = math.inf

    def cancel(self) -> None:
        """Nothing is due, and the timer is dropped (its owner is done)."""
        self._when = math.inf
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        when = self._when
        if when == math.inf:
            return
        # Moved on since the timer was set. (A timer may fire up to a millisecond early: the
        # loops round their clocks to it.)
        if loop.time() + 0.001 < when:
            self._timer = loop.call_at(when, self._fire, loop)
            return
        self._when = math.inf
        self._on_expiry()
