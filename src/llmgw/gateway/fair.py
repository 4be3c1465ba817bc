"""Fair shares of a busy local model: while every slot of its ready replicas is taken, a request
waits here, and the next to go is the one of the tenant served the fewest tokens for its weight.

A tenant is a team (by its id, weighing its `Team.weight`) or a key outside teams (weighing 1).
Each tenant of a model has a virtual time: the tokens it was sent, divided by its weight
(start-time fair queueing by tokens). A request is charged its estimate when it goes
(`reserve_estimate`: prompt bytes / 4 plus its `max_tokens`) and corrected to what it used when
it ends. A tenant that was idle starts at the virtual time now (the least start of a request
running or due), so idleness banks no credit. A tenant alone is held only while the slots are
all busy, and then in arrival order. With `spare` slots, the last `spare` free slots of a share go
only to a tenant with nothing running: a newcomer starts at once instead of after a slot turn,
and a tenant alone uses that many fewer.

The wait happens in the way out (`UpstreamCall.gate`, `stages.fair`), after the input judgment.

One per process, like the cold-start queue: each worker holds and releases its own requests,
counting only those it sent, against its share of the slots (the slots over the server's
workers, rounded up); each server as if it were alone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from llmgw.core.errors import QueueTimeout
from llmgw.gateway.usage import Tokens

# What a client whose wait ran out is told to wait: a slot frees as soon as one answer ends.
FAIR_RETRY_S = 5


@dataclass(eq=False)
class _Held:
    tenant: str
    weight: float
    cost: int
    arrived: float  # on the queue's monotonic clock
    go: asyncio.Future[float] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class _Line:
    """One model's requests: those sent and not yet ended, those held per tenant, and each
    tenant's virtual time (tokens served / weight)."""

    running: int = 0
    held: dict[str, deque[_Held]] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)  # running, per tenant
    starts: list[float] = field(default_factory=list)  # each running request's virtual start
    capacity: Callable[[], int] = lambda: 0  # its slots now, as its last request saw them

    def floor(self) -> float:
        """The virtual time now: the least start of a running request or of a held tenant's
        next (0: none). A tenant that was idle starts here, ahead of a backlog's next request
        even after what the backlog used was corrected down."""
        return min((*self.starts, *(self.served.get(t, 0.0) for t in self.held)), default=0.0)


@dataclass
class Turn:
    """A request's turn on a model's slots: `ended` (an exchange closer) gives the slot to the
    next held request and corrects its tenant's charge to what it used."""

    line: _Line
    tenant: str
    cost: int
    weight: float
    share: FairShare
    start: float  # its virtual start
    done: bool = False

    def ended(self, _status: int, tokens: Tokens) -> None:
        if self.done:
            return
        self.done = True
        self.line.running -= 1
        self.line.sent[self.tenant] -= 1
        self.line.starts.remove(self.start)
        used = tokens.total
        if used:  # nothing counted (a failure before any answer): the estimate stays
            self.line.served[self.tenant] = self.line.served.get(self.tenant, 0.0) + (
                used - self.cost) / self.weight
        if not self.line.running and not self.line.held:
            # The model is idle: what each tenant was served no longer matters (nor is kept).
            self.line.served.clear()
            self.line.sent.clear()
            self.line.starts.clear()
        self.share.release(self.line, self.line.capacity())


class FairShare:
    """Held requests of every local model of this process, released by fair share of tokens."""

    def __init__(self, timeout_s: float, monotonic: Callable[[], float],
                 processes: int = 1, spare: int = 0) -> None:
        """`timeout_s` is the longest a request waits before it is refused with
        `queue_timeout` (503, Retry-After); `processes` the server's workers, each of which
        sends its share of the slots; `spare` the slots of a share (when it has more) kept for
        a tenant with nothing running."""
        self._processes = processes
        self._spare = spare
        self._timeout_s = timeout_s
        self._monotonic = monotonic
        self._lines: dict[str, _Line] = {}

    def depths(self) -> dict[tuple[str, str], int]:
        """Requests held per (model, tenant), only where some are."""
        return {(model, tenant): len(q) for model, line in self._lines.items()
                for tenant, q in line.held.items()}

    def now(self, model: str, tenant: str, weight: float, cost: int,
            capacity: Callable[[], int]) -> Turn | None:
        """A turn on `model`'s slots at once when one is free and nobody waits (None: wait for
        one with `turn`). `capacity()` is its ready replicas' slots (0 for unknown: never held);
        `cost` the request's estimate in tokens; the turn's `ended` must run when it ends."""
        line = self._lines.setdefault(model, _Line())
        line.capacity = lambda: self._mine(capacity())
        if tenant not in line.held and not line.sent.get(tenant):
            # Idle until now: it starts level with the busy ones (idleness banks no credit).
            line.served[tenant] = max(line.served.get(tenant, 0.0), line.floor())
        if line.held or not self._room(line, tenant, line.capacity()):
            return None
        return Turn(line, tenant, cost, weight, self, _go(line, tenant, weight, cost))

    async def turn(self, model: str, tenant: str, weight: float, cost: int,
                   capacity: Callable[[], int]) -> Turn:
        """A turn on `model`'s slots, as `now`, once the request's share is due.
        QueueTimeout (503, Retry-After) once the wait budget is spent; a cancelled request
        leaves its place."""
        at_once = self.now(model, tenant, weight, cost, capacity)
        if at_once is not None:
            return at_once
        line = self._lines[model]
        held = _Held(tenant, weight, cost, self._monotonic())
        line.held.setdefault(tenant, deque()).append(held)
        if self._spare:
            self.release(line, line.capacity())  # a spare slot may be free for this newcomer
        try:
            async with asyncio.timeout(self._timeout_s):
                await held.go
        except BaseException as exc:
            if held.go.done() and not held.go.cancelled() and held.go.exception() is None:
                # Sent just as it left: its slot goes to the next one.
                Turn(line, tenant, cost, weight, self, held.go.result()).ended(0, Tokens())
            else:
                _leave(line, held)
            if isinstance(exc, TimeoutError):
                raise self._timed_out(model, held) from None
            raise
        return Turn(line, tenant, cost, weight, self, held.go.result())

    def _room(self, line: _Line, tenant: str, slots: int) -> bool:
        """Whether a request of `tenant` may go now: a slot is free (0 slots: not known, never
        held), and not only the spare ones while the tenant has requests running."""
        keep = self._spare if line.sent.get(tenant) and slots > self._spare else 0
        return not slots or slots - line.running > keep

    def _mine(self, slots: int) -> int:
        # Each worker sends its share of the slots, rounded up (one at least): the workers'
        # shares add up to the slots when they divide them, and never leave one idle.
        return -(-slots // self._processes)

    def refreshed(self) -> None:
        """Send what the slots of a new routing table make room for (a replica added)."""
        for line in self._lines.values():
            if line.held:
                self.release(line, line.capacity())

    def expire(self) -> None:
        """Refuse every held request whose wait budget is spent by the queue's clock (each
        wait's own timer does the same on the loop's clock)."""
        now = self._monotonic()
        for model, line in self._lines.items():
            for q in list(line.held.values()):
                for held in [h for h in q if now - h.arrived >= self._timeout_s
                             and not h.go.done()]:
                    _leave(line, held)
                    held.go.set_exception(self._timed_out(model, held))

    def release(self, line: _Line, slots: int) -> None:
        """Send held requests while `line` has free slots, the least served tenant's first
        among those with room (those whose wait budget is spent are refused, not sent late)."""
        self.expire()
        while ready := [t for t in line.held if self._room(line, t, slots)]:
            # On a tie, the tenant with fewer requests running: one that was idle goes before
            # a backlog level with it.
            tenant = min(ready, key=lambda t: (line.served.get(t, 0.0), line.sent.get(t, 0)))
            held = line.held[tenant].popleft()
            if not line.held[tenant]:
                del line.held[tenant]
            if held.go.done():
                # Its client left (the wait was cancelled) and it has not run to leave yet:
                # sending it would count a slot nobody ever gives back.
                continue
            held.go.set_result(_go(line, tenant, held.weight, held.cost))

    def _timed_out(self, model: str, held: _Held) -> QueueTimeout:
        waited = round(self._monotonic() - held.arrived)
        return QueueTimeout(f"{model}: every slot of its replicas stayed busy while it waited "
                            f"{waited} s", retry_after_s=FAIR_RETRY_S)


def _go(line: _Line, tenant: str, weight: float, cost: int) -> float:
    """Send a request of `tenant`: its virtual start (the tenant's time before it)."""
    start = line.served.get(tenant, 0.0)
    line.running += 1
    line.sent[tenant] = line.sent.get(tenant, 0) + 1
    line.served[tenant] = start + cost / weight
    line.starts.append(start)
    return start


def _leave(line: _Line, held: _Held) -> None:
    q = line.held.get(held.tenant)
    if q is not None and held in q:
        q.remove(held)
        if not q:
            del line.held[held.tenant]

