"""A judge's queue in the gateway: waiting for slots deadline first, shedding, cancellation;
time from a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import JudgeShed
from llmgw.core.guard import JudgeLoad
from llmgw.gateway.inflight import JudgeSlots, SharedInFlight
from llmgw.guard.admission import PromptEval, Slot
from llmgw.guard.judge_queue import JudgeQueue

BUDGET_S = 5.0


def judge_queue(clock: FakeClock, **slots: int) -> JudgeQueue:
    q = JudgeQueue("j1", clock.monotonic)
    q.sync(slots or {"r1": 2})
    return q


def learned(q: JudgeQueue, clock: FakeClock, seconds: float, n: int = 10) -> None:
    """The judge's recent judgments each took `seconds`, with every slot of its replica busy."""
    for _ in range(n):
        q.times.add(seconds, clock.monotonic(), q.book.widest)


async def waiting(q: JudgeQueue, prompt: str, deadline: float) -> asyncio.Task[Slot]:
    """A judgment that waits in the queue (it found every slot busy)."""
    task = asyncio.create_task(q.acquire(prompt, deadline))
    await asyncio.sleep(0)
    assert not task.done()
    return task


async def test_a_free_slot_is_taken_at_once_and_the_rest_wait(clock: FakeClock) -> None:
    q = judge_queue(clock)
    now = clock.monotonic()
    a = await q.acquire("a", now + BUDGET_S)
    b = await q.acquire("b", now + BUDGET_S)
    c = await waiting(q, "c", now + BUDGET_S)
    assert q.load() == JudgeLoad(slots=2, in_flight=2, queued=1, waited=1)
    q.release(a, 0.5)
    assert await c is a  # the freed slot, handed over at once
    q.release(b, 0.5)
    q.release(a, 0.5)
    assert q.load() == JudgeLoad(slots=2, in_flight=0, queued=0, waited=1, served=3)


async def test_waiters_get_slots_earliest_deadline_first(clock: FakeClock) -> None:
    q = judge_queue(clock, r1=1)
    now = clock.monotonic()
    held = await q.acquire("held", now + BUDGET_S)
    relaxed = await waiting(q, "relaxed", now + 4.0)
    urgent = await waiting(q, "urgent", now + 2.0)
    q.release(held, None)
    got = await urgent
    assert not relaxed.done()
    q.release(got, None)
    await relaxed


async def test_a_judgment_that_cannot_finish_is_shed_on_arrival(clock: FakeClock) -> None:
    q = judge_queue(clock)
    learned(q, clock, 1.0)
    now = clock.monotonic()
    for i in range(2):
        await q.acquire(f"running {i}", now + BUDGET_S)
    # Two slots, a second each: two rounds of waiting and the judgment's own second leave a
    # quarter of a 5 s budget to spare, so four wait and the fifth is shed at once.
    tasks = [await waiting(q, f"queued {i}", now + BUDGET_S) for i in range(4)]
    with pytest.raises(JudgeShed) as caught:
        await q.acquire("one too many", now + BUDGET_S)
    assert "saturated" in caught.value.message and "one too many" not in caught.value.message
    assert caught.value.status == 503 and caught.value.code == "judge_shed"
    assert q.load().shed == 1 and q.load().queued == 4
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert q.load().queued == 0


async def test_a_shed_says_when_one_like_it_would_be_let_in(clock: FakeClock) -> None:
    q = judge_queue(clock)
    for _ in range(10):  # a CPU judge seen one judgment at a time: a second each
        q.times.add(1.0, clock.monotonic(), occupancy=1)
    running = await q.acquire("running", clock.monotonic() + BUDGET_S)
    clock.advance(0.25)
    # Beside it, about 2 s, more than a 2 s budget holds with its headroom: one fewer running,
    # in about 0.75 s, is what it lacks.
    with pytest.raises(JudgeShed) as beside:
        await q.acquire("beside it", clock.monotonic() + 2.0)
    assert beside.value.come_back_s == pytest.approx(0.75)
    beside_it = await q.acquire("beside it", clock.monotonic() + BUDGET_S)
    # Both slots busy (2 s each now): a 2.5 s budget would wait about 1.75 s and take 2 s, 1.875 s
    # more than its 1.875 s to spare; one like it is let in once the wait has shrunk by that.
    with pytest.raises(JudgeShed) as behind:
        await q.acquire("behind them", clock.monotonic() + 2.5)
    assert behind.value.come_back_s == pytest.approx(1.875)
    q.release(running, 1.0)
    q.release(beside_it, 2.0)


async def test_a_tight_budget_is_shed_even_with_a_free_slot(clock: FakeClock) -> None:
    q = judge_queue(clock)
    learned(q, clock, 1.0)
    busy = await q.acquire("busy", clock.monotonic() + BUDGET_S)
    with pytest.raises(JudgeShed):
        await q.acquire("tight", clock.monotonic() + 0.5)
    assert q.load() == JudgeLoad(slots=2, in_flight=1, shed=1)  # nothing more taken
    q.release(busy, 1.0)
    # With nothing in flight the judge is tried all the same: its answer is the evidence.
    probe = await q.acquire("tight", clock.monotonic() + 0.5)
    assert q.load().in_flight == 1
    q.release(probe, 0.3)


async def test_a_waiter_whose_turn_comes_too_late_is_shed_not_sent(clock: FakeClock) -> None:
    q = judge_queue(clock, r1=1)
    learned(q, clock, 1.0)
    now = clock.monotonic()
    held = await q.acquire("held", now + BUDGET_S)
    late = await waiting(q, "late", now + 3.0)
    clock.advance(2.5)  # the judgment ahead took long: 0.5 s left, the judge needs 1 s
    q.release(held, 2.5)
    with pytest.raises(JudgeShed):
        await late
    assert q.load().in_flight == 0 and q.load().shed == 1


async def test_a_cancelled_waiter_frees_its_place_and_a_slot_it_was_handed(clock: FakeClock) -> None:
    q = judge_queue(clock, r1=1)
    now = clock.monotonic()
    held = await q.acquire("held", now + BUDGET_S)
    first = await waiting(q, "first", now + 2.0)
    second = await waiting(q, "second", now + 3.0)
    q.release(held, None)  # the slot is handed to `first` ...
    first.cancel()  # ... which is cancelled before it runs: the slot goes on to `second`
    with pytest.raises(asyncio.CancelledError):
        await first
    slot = await second
    assert q.load().in_flight == 1
    q.release(slot, None)
    assert q.load().in_flight == 0 and q.load().queued == 0


async def test_a_new_replica_serves_the_waiters_at_once(clock: FakeClock) -> None:
    q = judge_queue(clock, r1=1)
    now = clock.monotonic()
    await q.acquire("held", now + BUDGET_S)
    queued = await waiting(q, "queued", now + BUDGET_S)
    q.sync({"r1": 1, "r2": 1})
    assert (await queued).replica == "r2"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_timeouts_teach_the_shed_rule_a_judge_slower_than_the_budget(clock: FakeClock) -> None:
    q = judge_queue(clock)
    for _ in range(10):
        slot = await q.acquire("times out", clock.monotonic() + 1.0)
        clock.advance(1.0)
        q.release(slot, None, outlasted_s=1.0)
    # One whose budget is shorter than what the judge had and did not finish in is not sent
    # while the judge is busy.
    await q.acquire("busy", clock.monotonic() + BUDGET_S)
    with pytest.raises(JudgeShed):
        await q.acquire("would time out too", clock.monotonic() + 0.9)
    assert q.load().served == 0


async def test_a_judgment_beside_a_running_one_is_expected_to_take_twice_as_long(
        clock: FakeClock) -> None:
    q = judge_queue(clock)
    for _ in range(10):  # a CPU judge seen one judgment at a time: a second each
        q.times.add(1.0, clock.monotonic(), occupancy=1)
    running = await q.acquire("running", clock.monotonic() + BUDGET_S)
    # A free slot, but sharing the judge's threads: about 2 s, more than a 1.5 s budget holds.
    with pytest.raises(JudgeShed, match="2000 ms to judge"):
        await q.acquire("beside it", clock.monotonic() + 1.5)
    beside = await q.acquire("beside it", clock.monotonic() + BUDGET_S)
    assert running.occupancy == beside.occupancy == 2  # each ran two at once
    q.release(running, 2.0)
    q.release(beside, 2.0)
    assert q.load() == JudgeLoad(slots=2, in_flight=0, shed=1, served=2)


async def test_a_new_text_after_cached_ones_is_shed_on_arrival_not_when_its_turn_comes(
        clock: FakeClock) -> None:
    q = judge_queue(clock, r1=1)
    head = "<the judge's fixed policy text>" * 20
    # A spell of one text again: cached, 0.5 s each; earlier, one new text took 2.5 s, 2 s of
    # it evaluating 250 of its 300 tokens (1,200 characters): 2 ms a character.
    q.times.add(2.5, clock.monotonic(), prompt=PromptEval(2.0, 250, 50), prompt_chars=1200)
    for _ in range(10):
        q.times.add(0.5, clock.monotonic(), prompt=PromptEval(0.01, 1, 299), prompt_chars=1200)
    cached = await q.acquire(head + "the same text", clock.monotonic() + BUDGET_S)
    assert cached.new_chars == len(head + "the same text")  # the slot was cold
    # The engine had it cached after all (another process had sent it there): what the gateway
    # thought its cache held does not make the judge look faster.
    q.release(cached, 0.5, prompt=PromptEval(0.01, 1, 160))
    running = await q.acquire(head + "the same text", clock.monotonic() + BUDGET_S)
    # A new text would wait about 0.5 s for the running one, then take about 2.5 s: more than
    # what 3.2 s holds with a quarter to spare, so it is shed now. On the cached spell's 0.5 s
    # alone it would have been let in, to be shed late when its turn came, or to time out.
    new = asyncio.create_task(q.acquire(head + "x" * 1000, clock.monotonic() + 3.2))
    await asyncio.sleep(0)
    assert new.done(), "a new text was let in on the cached judgments' times"
    with pytest.raises(JudgeShed, match="2490 ms to judge"):
        await new
    # The same text again is still let in.
    same = await waiting(q, head + "the same text", clock.monotonic() + 3.2)
    q.release(running, 0.5)
    q.release(await same, 0.5)
    assert q.load().shed == 1


@pytest.fixture
def two_leases(two_workers: tuple[SharedInFlight, SharedInFlight]) -> tuple[JudgeSlots, JudgeSlots]:
    """The slot lease of one server's two worker processes, in its real in-flight table."""
    return JudgeSlots(two_workers[0]), JudgeSlots(two_workers[1])


def two_queues(clock: FakeClock, leases: tuple[JudgeSlots, JudgeSlots],
               **slots: int) -> tuple[JudgeQueue, JudgeQueue]:
    """The queues of one judge in a server's two worker processes."""
    main, worker = (JudgeQueue("j1", clock.monotonic, lease=lease) for lease in leases)
    for q in (main, worker):
        q.sync(slots or {"r1": 2})
    return main, worker


async def test_two_workers_never_hold_more_slots_of_a_replica_than_it_has(
        clock: FakeClock, two_leases: tuple[JudgeSlots, JudgeSlots]) -> None:
    main, worker = two_queues(clock, two_leases)
    now = clock.monotonic()
    a = await main.acquire("a", now + BUDGET_S)
    b = await worker.acquire("b", now + BUDGET_S)
    assert {(a.replica, a.index), (b.replica, b.index)} == {("r1", 0), ("r1", 1)}
    # Each worker's own book has a slot free, but the server's replica has none: both wait.
    c = await waiting(main, "c", now + BUDGET_S)
    d = await waiting(worker, "d", now + BUDGET_S)
    # A slot given back goes at once to a waiter of the process that gave it back...
    worker.release(b, 0.5)
    d_slot = await d
    assert (d_slot.replica, d_slot.index) == (b.replica, b.index) and not c.done()
    # ...and one another process gives back is found by the next look.
    worker.release(d_slot, 0.5)
    c_slot = await asyncio.wait_for(c, timeout=1.0)
    assert (c_slot.replica, c_slot.index) == (b.replica, b.index)
    main.release(a, 0.5)
    main.release(c_slot, 0.5)
    assert not any(two_leases[0].taken("r1", i) for i in range(2))
    for q in (main, worker):
        q.close()


async def outcomes(judgments: list[asyncio.Task[Slot]]) -> list[str]:
    """Of judgments just asked for: "sent" (handed a slot), "waits" or "shed"."""
    await asyncio.sleep(0)
    said = []
    for task in judgments:
        if not task.done():
            said.append("waits")
        elif isinstance(task.exception(), JudgeShed):
            said.append("shed")
        else:
            said.append("sent")
    return said


async def test_a_burst_spread_over_two_workers_is_let_in_as_one_worker_would(
        clock: FakeClock, two_leases: tuple[JudgeSlots, JudgeSlots]) -> None:
    # One slot and a second a judgment: one running and two waiting finish within 3.75 s (the
    # 5 s budget less the arrival's headroom); the next would not. Each worker alone would let
    # that many in, twice as many in all, to be shed late or time out.
    main, worker = two_queues(clock, two_leases, r1=1)
    for q in (main, worker):
        learned(q, clock, 1.0)
    now = clock.monotonic()
    burst = []
    for i in range(10):
        q = (main, worker)[i % 2]
        burst.append(asyncio.create_task(q.acquire(f"burst {i}", now + BUDGET_S)))
        await asyncio.sleep(0)
    said = await outcomes(burst)
    assert said[:3] == ["sent", "waits", "waits"] and set(said[3:]) == {"shed"}, said
    for task in burst[1:3]:
        task.cancel()
    main.release(burst[0].result(), 1.0)
    for q in (main, worker):
        q.close()


async def test_a_worker_that_has_timed_no_judgment_waits_by_the_others_times(
        clock: FakeClock, two_leases: tuple[JudgeSlots, JudgeSlots]) -> None:
    main, worker = two_queues(clock, two_leases, r1=1)
    for i in range(4):  # main has judged: a second each
        main.release(await main.acquire(f"earlier {i}", clock.monotonic() + BUDGET_S), 1.0)
    now = clock.monotonic()
    running = await main.acquire("running", now + BUDGET_S)
    # The worker has timed nothing itself: by main's times, two can wait behind the running one
    # (before, it expected no wait at all and let in the whole burst).
    burst = [asyncio.create_task(worker.acquire(f"burst {i}", now + BUDGET_S)) for i in range(5)]
    assert await outcomes(burst) == ["waits", "waits", "shed", "shed", "shed"]
    for task in burst[:2]:
        task.cancel()
    main.release(running, 1.0)
    for q in (main, worker):
        q.close()


class TwoServersSlots:
    """The install's shared slots, as Redis keeps them, for queues of several servers."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], str] = {}
        self.asked = asyncio.Event()
        self.answer: asyncio.Event | None = None  # when set, `take` waits for it
        self._n = 0

    def token(self) -> str:
        self._n += 1
        return f"t{self._n}"

    async def take(self, replica: str, index: int, token: str, hold_s: float) -> bool:
        self.asked.set()
        if self.answer is not None:
            await self.answer.wait()
        if (replica, index) in self.held:
            return False
        self.held[(replica, index)] = token
        return True

    def give(self, replica: str, index: int, token: str) -> None:
        if self.held.get((replica, index)) == token:
            del self.held[(replica, index)]


async def test_a_slot_another_server_holds_is_not_sent_to_and_is_taken_once_given_back(
        clock: FakeClock) -> None:
    cluster = TwoServersSlots()
    a, b = (JudgeQueue("j1", clock.monotonic, cluster=cluster) for _ in range(2))
    for q in (a, b):
        q.sync({"r1": 2})
    now = clock.monotonic()
    held = [await a.acquire(f"a{i}", now + BUDGET_S) for i in range(2)]
    assert len(cluster.held) == 2
    other = asyncio.create_task(b.acquire("b", now + BUDGET_S))
    await asyncio.sleep(0)
    assert not other.done() and b.load().queued == 1  # both slots are away: it waits
    a.release(held[0], 0.5)
    clock.advance(0.05)  # past the time a refused slot is left alone
    got = await other  # found on the queue's next look
    assert got.index == held[0].index and cluster.held[("r1", got.index)] == got.token
    b.release(got, 0.5)
    a.release(held[1], 0.5)
    assert cluster.held == {}


async def test_a_judgment_cancelled_while_taking_its_slot_gives_it_back_everywhere(
        clock: FakeClock) -> None:
    cluster = TwoServersSlots()
    cluster.answer = asyncio.Event()
    q = JudgeQueue("j1", clock.monotonic, cluster=cluster)
    q.sync({"r1": 1})
    taking = asyncio.create_task(q.acquire("p", clock.monotonic() + BUDGET_S))
    await cluster.asked.wait()
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    assert q.load().in_flight == 0
    cluster.answer.set()
    slot = await q.acquire("p2", clock.monotonic() + BUDGET_S)
    assert cluster.held == {("r1", 0): slot.token}
