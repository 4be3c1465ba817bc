"""The request queue: a request for a local model with no ready replica waits here, in arrival
order, until a routing table has a replica for it, or its time is up.

One queue per process, bounded per server: each process keeps and wakes its own waiters, and
counts them in the server's in-flight table (`InFlight`, shared by a server's workers) so that
`queue_max` holds for the server as a whole. Waiters are woken by the refresher's new routing
tables, never by polling; the first waiter of a model tells the server (`on_cold`), which
records the demand so the leader places a replica at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from llmgw.core import tracing
from llmgw.core.demand import Queued
from llmgw.core.errors import EngineFailing, NoReadyReplica, QueueFull, QueueTimeout
from llmgw.core.settings import ControlSettings
from llmgw.gateway.inflight import InFlight, LocalInFlight, entry
from llmgw.gateway.upstream.table import RoutingTable, Serving

# What a client turned away by a full queue is told to wait: a replica that is loading is often
# ready within seconds, and the queue drains all at once when it is.
QUEUE_FULL_RETRY_S = 5


@dataclass(eq=False)
class _Waiter:
    arrived: float  # on the queue's monotonic clock
    woken: asyncio.Event = field(default_factory=asyncio.Event)


class ColdQueue:
    """Bounded per-model FIFO queues of requests waiting for a replica to become ready."""

    def __init__(self, settings: ControlSettings, monotonic: Callable[[], float],
                 on_cold: Callable[[str], None], flight: InFlight | None = None) -> None:
        self._max = settings.queue_max
        self._flight = flight or LocalInFlight()
        self._timeout_s = settings.queue_timeout_s
        self._monotonic = monotonic
        self._on_cold = on_cold
        # Only models with waiters have a line: an empty one is dropped, so the next arrival
        # starts a new cold episode.
        self._lines: dict[str, deque[_Waiter]] = {}

    def depths(self) -> dict[str, int]:
        """Requests waiting per model (only models with any)."""
        return {name: len(line) for name, line in self._lines.items()}

    def queued(self, now: datetime) -> dict[str, Queued]:
        """What waits per model, with when its oldest request arrived (for the server's activity)."""
        mono = self._monotonic()
        return {
            name: Queued(waiting=len(line), since=now - timedelta(seconds=max(mono - line[0].arrived, 0.0)))
            for name, line in self._lines.items()
        }

    async def wait(self, route: Serving, current: Callable[[], Serving]) -> Serving:
        """A route of the same model with upstreams, once `current()` has one.

        QueueFull (429) when `queue_max` requests already wait for the model, QueueTimeout (503)
        after `queue_timeout_s`, NoReadyReplica at once (or as soon as a table says so) when the
        model fits on no node, EngineFailing likewise when every replica of it failed. A
        cancelled waiter leaves its place."""
        if route.upstreams:
            return route
        _refuse_settled(route)
        name = route.model.name
        if self._max == 0:
            # No queue on this server: the request is refused, but the model is still started.
            self._on_cold(name)
            raise NoReadyReplica(f"{name} has no ready replica yet ({route.unavailable}); this "
                                 "server queues no requests (queue_max is 0): try again shortly")
        counted = entry("queue", name)  # the model's waiters, in the server's table
        with self._flight.held():  # the check and the count are one step across the workers
            waiting = self._flight.get(counted)[0]
            if waiting >= self._max:
                raise QueueFull(f"{name} has no ready replica and this server's queue for it is "
                                f"full ({waiting} waiting): try again shortly", QUEUE_FULL_RETRY_S)
            self._flight.add(counted, 1, 0)
        line = self._lines.get(name)
        if line is None:
            line = self._lines[name] = deque()
        waiter = _Waiter(self._monotonic())
        line.append(waiter)
        try:
            if len(line) == 1:
                self._on_cold(name)
            attributes: tracing.Attributes = {"gen_ai.request.model": name,
                                              "llmgw.queue.position": waiting + 1}
            with tracing.spanned("queue wait", attributes=attributes) as span:
                ready = await self._until_ready(waiter, current)
                span.set("llmgw.queue.waited_s", round(self._monotonic() - waiter.arrived, 3))
                return ready
        finally:
            self._flight.add(counted, -1, 0)
            line.remove(waiter)
            if not line:
                del self._lines[name]

    async def _until_ready(self, waiter: _Waiter, current: Callable[[], Serving]) -> Serving:
        try:
            async with asyncio.timeout(self._timeout_s):
                while True:
                    await waiter.woken.wait()
                    waiter.woken.clear()
                    route = current()
                    if route.upstreams:
                        return route
                    _refuse_settled(route)
                    if self._monotonic() - waiter.arrived >= self._timeout_s:
                        raise TimeoutError
        except TimeoutError:
            raise self._timed_out(current(), waiter) from None

    def refreshed(self, table: RoutingTable) -> None:
        """Wake the waiters `table` settles, in arrival order: their model has a replica, fits
        nowhere, or is gone; and any whose time is up by the queue's clock."""
        now = self._monotonic()
        for name, line in self._lines.items():
            route = table.routes.get(name)
            settled = route is None or bool(route.upstreams or route.nowhere or route.failing)
            for waiter in line:
                if settled or now - waiter.arrived >= self._timeout_s:
                    waiter.woken.set()

    def _timed_out(self, route: Serving, waiter: _Waiter) -> QueueTimeout:
        waited = round(self._monotonic() - waiter.arrived)
        name = route.model.name
        if route.loading_on:
            return QueueTimeout(f"{name} is loading on {route.loading_on}: waited {waited} s")
        return QueueTimeout(f"{name} is waiting for a replica ({route.unavailable}): waited {waited} s")


def _refuse_settled(route: Serving) -> None:
    """Refuse a request for a model that no replica is coming for: it fits on no node, or every
    replica of it failed."""
    if route.nowhere:
        raise NoReadyReplica(f"{route.model.name} fits on no node: {route.nowhere}")
    if route.failing:
        raise EngineFailing(f"{route.model.name} cannot serve: its engine keeps failing: "
                            f"{route.failing}")
