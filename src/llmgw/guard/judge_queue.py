"""One judge's admission in this gateway: judgments wait here for a slot, deadline first, or are
shed when they cannot finish (the rules are in `admission`; this adds the waiting).

A server with several worker processes has one admission per process over the same replicas, so
the processes lease slots from one table (`SlotLease`, given by the server): a slot is taken
there before a judgment is sent to it and given back when it ends, so a replica never has more
judgments from the server in flight than slots. An install with a shared Redis also takes each
slot there (`ClusterSlots`, one round trip), so several servers never send a replica more than
its slots either. A slot another process or server gives back wakes no one here; while
judgments wait and some slots are held elsewhere, the queue looks again every `LEASE_POLL_S`.

The processes also count their waiting judgments in that table: each process's wait guess counts
the judgments waiting in the others as ahead of a new one, and a new one takes no free slot while
they wait. Without it every process admitted as many judgments as the judge could finish in the
budget as if it were alone, and a burst spread over the workers let in that many times too many:
they were shed late, when their turn came, or timed out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from llmgw.core.errors import JudgeShed
from llmgw.core.guard import JudgeLoad
from llmgw.guard.admission import (
    ARRIVAL_HEADROOM,
    DeadlineQueue,
    PromptEval,
    ServiceTimes,
    Slot,
    SlotBook,
    expected_wait,
    sheds,
)

logger = logging.getLogger(__name__)

# How often judgments waiting here look for slots other processes gave back: short against a
# judgment's second or so, and only while some wait.
LEASE_POLL_S = 0.02


class SlotLease(Protocol):
    """The slots the processes of one server hold, by replica id and slot index."""

    def taken(self, replica: str, index: int) -> bool:
        """Whether a process holds the slot."""
        ...

    def take(self, replica: str, index: int) -> bool:
        """Hold the slot if no process does (one step for all of them); False if one does."""
        ...

    def give(self, replica: str, index: int) -> None:
        """Let go of a slot this process holds."""
        ...

    def queued(self, judge: str) -> int:
        """Judgments of `judge` waiting for a slot in all the server's processes."""
        ...

    def count_queued(self, judge: str, more: int) -> None:
        """This process has `more` judgments of `judge` waiting (negative: fewer)."""
        ...

    def timed(self, judge: str) -> float:
        """How long the server's other processes lately see a judgment of `judge` take (the
        mean of their p90s, in seconds); 0 when none has timed one."""
        ...

    def show_timed(self, judge: str, seconds: float) -> None:
        """This process lately sees a judgment of `judge` take `seconds` (its p90; 0: none)."""
        ...


class ClusterSlots(Protocol):
    """The slots the servers of an install hold (`guard.shared_slots.SharedSlots`)."""

    def token(self) -> str:
        """A new claim's token, unique in the install."""
        ...

    async def take(self, replica: str, index: int, token: str, hold_s: float) -> bool:
        """Hold the slot with `token` for about `hold_s`; False when another server holds it."""
        ...

    def give(self, replica: str, index: int, token: str) -> None:
        """Give back a slot taken with `token`."""
        ...


class Unshared:
    """One process alone: its own book of slots is the whole truth."""

    def taken(self, replica: str, index: int) -> bool:
        return False

    def take(self, replica: str, index: int) -> bool:
        return True

    def give(self, replica: str, index: int) -> None:
        pass

    def queued(self, judge: str) -> int:
        return 0  # the process's own queue is every judgment waiting

    def count_queued(self, judge: str, more: int) -> None:
        pass

    def timed(self, judge: str) -> float:
        return 0.0

    def show_timed(self, judge: str, seconds: float) -> None:
        pass


UNSHARED = Unshared()


class JudgeQueue:
    """Hands out the slots of one judge's ready replicas, never more than they have.

    `acquire` returns a slot at once, waits for one, or raises `JudgeShed`; every slot acquired
    must be given back with `release` (a cancelled wait gives back what it was handed itself).
    """

    def __init__(
        self, judge: str, monotonic: Callable[[], float],
        observe: Callable[[str, float], None] = lambda _judge, _seconds: None,
        lease: SlotLease = UNSHARED, cluster: ClusterSlots | None = None,
    ) -> None:
        self.judge = judge
        self._lease = lease
        self._cluster = cluster
        self._poll: asyncio.TimerHandle | None = None
        self._monotonic = monotonic
        self._observe = observe  # told every service time (the service-time histogram)
        self.book = SlotBook()
        self.waiting = DeadlineQueue()
        self._shown = 0  # of `waiting`, what the lease was last told
        self.times = ServiceTimes()
        self._futures: dict[int, asyncio.Future[Slot]] = {}
        self.waited = 0
        self.shed = 0
        self.served = 0

    def sync(self, slots_by_replica: Mapping[str, int],
             lanes_by_replica: Mapping[str, int] | None = None) -> None:
        """Follow the judge's ready replicas (replica id -> slots, and how many judgments each
        runs at once where fewer: `SlotBook`); new slots serve waiters."""
        self.book.sync(slots_by_replica, lanes_by_replica)
        self._dispatch()

    def load(self) -> JudgeLoad:
        return JudgeLoad(slots=self.book.total, in_flight=self.book.busy, queued=len(self.waiting),
                         waited=self.waited, shed=self.shed, served=self.served)

    def close(self) -> None:
        """Stop looking for slots other processes gave back, and stop counting as waiting."""
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        self._lease.count_queued(self.judge, -self._shown)
        self._shown = 0

    def _show_queue(self) -> None:
        """Tell the server's other processes how many judgments wait here."""
        if (n := len(self.waiting)) != self._shown:
            self._lease.count_queued(self.judge, n - self._shown)
            self._shown = n

    def _p90(self, now: float, occupancy: int, new_chars: int | None = None) -> float:
        """The judge's recent p90 service time at `occupancy` for `new_chars` new characters;
        with none timed here lately, what the server's other processes see: a worker that has
        judged nothing yet would otherwise expect every wait to be nothing, and admit a whole
        burst."""
        return (self.times.quantile(0.9, now, occupancy, new_chars)
                or self._lease.timed(self.judge))

    def _waiting_elsewhere(self) -> int:
        """Judgments waiting for this judge in the server's other processes."""
        return max(self._lease.queued(self.judge) - self._shown, 0)

    def _look_around(self) -> None:
        """Mark the slots other processes or servers hold now as away."""
        if self._lease is not UNSHARED or self._cluster is not None:
            now = self._monotonic()
            for slot in self.book.idle():
                slot.away = slot.away_until > now or self._lease.taken(slot.replica, slot.index)

    def _pick(self, prompt: str) -> tuple[Slot, int] | None:
        """A free slot for `prompt`, held in the lease, and its replica's occupancy with it."""
        self._look_around()
        while (picked := self.book.pick(prompt)) is not None:
            slot = picked[0]
            if self._lease.take(slot.replica, slot.index):
                return picked
            slot.away = True  # another process took it since it was looked at
        return None

    def _look_again(self) -> None:
        """While judgments wait and other processes hold slots or have judgments waiting (which
        take the slots they find free first), look again shortly."""
        if (len(self.waiting) and self._poll is None
                and (self.book.away or self._waiting_elsewhere())):
            self._poll = asyncio.get_running_loop().call_later(LEASE_POLL_S, self._looked)

    def _looked(self) -> None:
        self._poll = None
        self._dispatch()

    async def acquire(self, prompt: str, deadline: float) -> Slot:
        """A slot for a judgment of `prompt` that must be answered by `deadline` (monotonic)."""
        while True:
            slot = await self._acquire_here(prompt, deadline)
            if self._cluster is None:
                return slot
            slot.token = self._cluster.token()
            try:
                taken = await self._cluster.take(slot.replica, slot.index, slot.token,
                                                 max(deadline - self._monotonic(), 0.0))
            except BaseException:  # cancelled while asking: given back, should Redis have said yes
                self._unclaim(slot, away_s=0.0)
                raise
            if taken:
                return slot
            # Another server runs a judgment on it: this one takes another slot or waits, and
            # the slot is not tried again before the queue's next look.
            self._unclaim(slot, away_s=LEASE_POLL_S)

    def _unclaim(self, slot: Slot, away_s: float) -> None:
        """Give back a slot nothing was sent to (the cluster's hold, if any, with it)."""
        self.book.unclaim(slot)
        self._let_go(slot)
        slot.away_until = self._monotonic() + away_s
        self._dispatch()

    def _let_go(self, slot: Slot) -> None:
        """Give `slot` back to the server's lease and the install's."""
        self._lease.give(slot.replica, slot.index)
        if self._cluster is not None and slot.token:
            self._cluster.give(slot.replica, slot.index, slot.token)
        slot.token = ""

    async def _acquire_here(self, prompt: str, deadline: float) -> Slot:
        """A slot free in this server's book (and lease) for `prompt`."""
        now = self._monotonic()
        # One that waits here or in another process came first: a slot it finds free is its.
        elsewhere = self._waiting_elsewhere()
        first = not len(self.waiting) and not elsewhere
        picked = self._pick(prompt) if first else None
        if picked is not None:
            slot, occupancy = picked
            # A judge with nothing in flight is always tried: it costs no other judgment
            # anything, and its answer is how the shed rule learns it is fast again.
            p90 = self._p90(now, occupancy, self.book.new_chars(slot, prompt))
            if (self.book.busy or self.book.away) and sheds(deadline - now, 0.0, p90,
                                                             ARRIVAL_HEADROOM):
                self._lease.give(slot.replica, slot.index)
                # Too slow beside the judgments running: one fewer of them is what it lacks.
                raise self._shed(deadline - now, 0, 0.0, p90,
                                 min(self._ends(now, occupancy - 1), default=p90))
            self.book.claim(slot, prompt, now)
            return slot
        # Behind others, it runs on a full replica, as do the judgments it waits for (a slot
        # another process holds is expected to take a whole judgment, as do the judgments ahead:
        # judged by this one's size, as the traffic of the moment). At the p90, not the median:
        # a wait guessed short lets in a judgment that is shed only when its turn comes, late,
        # or times out. Those waiting in other processes came first, as far as this one knows,
        # and the slots they hold are as they are now (a slot seen free when this process last
        # looked would make the wait look short; `_pick` has just looked).
        if not first:
            self._look_around()
        full = self.book.widest
        new_chars = self.book.uncached(prompt)
        p90 = self._p90(now, full, new_chars)
        ahead = self.waiting.ahead_of(deadline) + elsewhere
        # (A judgment running here with none timed here is expected to take a whole one.)
        left = [end or p90 for end in self._ends(now, full)] + [p90] * self.book.away
        wait = expected_wait(ahead, self.book.free, left, p90)
        if sheds(deadline - now, wait, p90, ARRIVAL_HEADROOM):
            # One like it is let in once the wait has shrunk by what it overran.
            over = wait + p90 - (deadline - now) * (1.0 - ARRIVAL_HEADROOM)
            raise self._shed(deadline - now, ahead, wait, p90, over)
        waiter = self.waiting.push(deadline, prompt, now, wait)
        future: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._futures[waiter.seq] = future
        self.waited += 1
        self._show_queue()
        self._look_again()
        try:
            return await future
        except asyncio.CancelledError:
            # Gone while waiting (the client left, or the budget ran out): its place goes, and a
            # slot handed to it just now goes to the next in line.
            self.waiting.drop(waiter)
            self._show_queue()
            if future.done() and not future.cancelled():
                if future.exception() is None:
                    self.release(future.result(), None)
            raise
        finally:
            del self._futures[waiter.seq]

    def release(self, slot: Slot, served_s: float | None, outlasted_s: float | None = None,
                prompt: PromptEval | None = None) -> None:
        """Give `slot` back; `served_s` is how long the judge took when it answered (`prompt`:
        what it spent on the prompt, when the engine said), `outlasted_s` how long it had when
        the judgment's budget ran out (it would have taken longer: counted as a service time,
        so a judge slower than the budgets is shed)."""
        now = self._monotonic()
        self.book.give_back(slot, now)
        self._let_go(slot)
        if outlasted_s is not None:
            self.times.add(outlasted_s, now, slot.occupancy)
        if served_s is not None:
            self.times.add(served_s, now, slot.occupancy, prompt=prompt,
                           prompt_chars=len(slot.prompt))
            self.served += 1
            self._observe(self.judge, served_s)
        if outlasted_s is not None or served_s is not None:
            self._lease.show_timed(self.judge, self.times.quantile(0.9, now, self.book.widest))
        self._dispatch()

    def _dispatch(self) -> None:
        """Free slots to the waiters, earliest deadline first; one that can no longer finish is
        shed rather than sent."""
        self._hand_out()
        self._show_queue()

    def _hand_out(self) -> None:
        while (waiter := self.waiting.peek()) is not None:
            future = self._futures.get(waiter.seq)
            if future is None or future.done():
                self.waiting.pop()
                continue
            picked = self._pick(waiter.prompt)
            if picked is None:
                self._look_again()
                return
            self.waiting.pop()
            now = self._monotonic()
            slot, occupancy = picked
            left = waiter.deadline - now
            p90 = self._p90(now, occupancy, self.book.new_chars(slot, waiter.prompt))
            if sheds(left, 0.0, p90):
                self._lease.give(slot.replica, slot.index)
                # Admitted on a guessed wait that proved short: worth a line, it is how an
                # operator (and the estimate's author) sees the guess miss.
                logger.info("judge %s: shed a judgment at its turn after waiting %.0f ms "
                            "(expected %.0f ms); %.0f ms left, %.0f ms to judge (p90)",
                            self.judge, (now - waiter.arrived) * 1000,
                            waiter.expected_wait * 1000, left * 1000, p90 * 1000)
                future.set_exception(self._shed(left, 0, 0.0, p90))
                continue
            self.book.claim(slot, waiter.prompt, now)
            future.set_result(slot)

    def _ends(self, now: float, occupancy: int) -> list[float]:
        """How much longer each judgment running here takes (p90), were its replica at
        `occupancy`."""
        return [self.times.left(ran, 0.9, now, occupancy, chars)
                for ran, chars in self.book.running(now)]

    def _shed(self, left_s: float, ahead: int, wait_s: float, p90_s: float,
              come_back_s: float = 0.0) -> JudgeShed:
        """The shed, counted; `come_back_s`: how long until one like it would be let in."""
        self.shed += 1
        wait = f"{ahead} judgments ahead (about {wait_s * 1000:.0f} ms), " if ahead else ""
        return JudgeShed(
            f"judge {self.judge} is saturated: {wait}{p90_s * 1000:.0f} ms to judge (p90) and "
            f"{max(left_s, 0.0) * 1000:.0f} ms of the budget left; not sent",
            come_back_s=max(come_back_s, 0.0),
        )
