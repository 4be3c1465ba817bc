"""Judge admission's pure rules with plain data: the deadline queue, slot accounting, the shed
rule and the cache-affinity pick."""

from __future__ import annotations

import math

import pytest

from llmgw.guard.admission import (
    DeadlineQueue,
    PromptEval,
    ServiceTimes,
    SlotBook,
    expected_wait,
    shared_prefix,
    sheds,
)

HEAD = "<fixed policy text of the judge, the same for every judgment>"


def prompt(conversation: str) -> str:
    """A judge prompt: the fixed head, then the conversation."""
    return HEAD + conversation


def book(**slots: int) -> SlotBook:
    """Replicas by id with their slot counts."""
    b = SlotBook()
    b.sync(slots)
    return b


# --- the deadline queue --------------------------------------------------------------------------


def test_the_earliest_deadline_goes_first_then_the_earliest_arrival() -> None:
    q = DeadlineQueue()
    late = q.push(10.0, "late")
    first_of_two = q.push(5.0, "a")
    second_of_two = q.push(5.0, "b")
    urgent = q.push(2.0, "urgent")
    assert len(q) == 4
    assert [q.pop(), q.pop(), q.pop(), q.pop(), q.pop()] == [urgent, first_of_two, second_of_two,
                                                             late, None]
    assert len(q) == 0


def test_a_cancelled_waiter_is_skipped_and_no_longer_counts() -> None:
    q = DeadlineQueue()
    gone = q.push(1.0, "gone")
    stays = q.push(2.0, "stays")
    q.drop(gone)
    q.drop(gone)  # twice: still counted once
    assert len(q) == 1 and q.ahead_of(3.0) == 1
    assert q.pop() is stays and q.pop() is None


def test_ahead_of_counts_the_waiters_with_an_earlier_or_equal_deadline() -> None:
    q = DeadlineQueue()
    for d in (1.0, 2.0, 2.0, 9.0):
        q.push(d, "")
    assert [q.ahead_of(d) for d in (0.5, 2.0, 5.0, 10.0)] == [0, 3, 3, 4]


# --- service times and the shed rule ---------------------------------------------------------


def test_service_time_quantiles_are_nearest_rank_over_the_last_samples() -> None:
    times = ServiceTimes(size=10)
    assert times.quantile(0.9, now=0.0) == 0.0  # no evidence: nothing is shed
    for ms in range(1, 21):  # 1..20; only 11..20 are kept
        times.add(ms / 1000, now=0.0)
    assert len(times) == 10
    assert times.quantile(0.5, now=0.0) == pytest.approx(0.015)
    assert times.quantile(0.9, now=0.0) == pytest.approx(0.019)
    assert times.quantile(1.0, now=0.0) == pytest.approx(0.020)


def test_service_times_are_forgotten_so_a_judge_shed_for_long_is_tried_again() -> None:
    times = ServiceTimes(memory_s=60.0)
    times.add(9.0, now=0.0)
    times.add(1.0, now=30.0)
    assert times.quantile(0.9, now=60.0) == 9.0
    assert times.quantile(0.9, now=61.0) == 1.0
    assert times.quantile(0.9, now=91.0) == 0.0


def test_service_times_taken_one_at_a_time_are_scaled_to_two_at_once_until_known() -> None:
    times = ServiceTimes()
    for t in (1.0, 1.2, 1.1):
        times.add(t, now=0.0, occupancy=1)
    # Two judgments sharing a CPU judge take about twice as long each, until it is seen.
    assert times.quantile(0.9, now=1.0, occupancy=2) == pytest.approx(2.4)
    for t in (1.5, 1.6, 1.4, 1.5):
        times.add(t, now=2.0, occupancy=2)
    assert times.quantile(0.9, now=3.0, occupancy=2) == 1.6  # its own samples now
    assert times.quantile(0.9, now=3.0, occupancy=1) == pytest.approx(1.2)


def test_a_running_judgment_is_expected_to_take_what_longer_ones_took() -> None:
    times = ServiceTimes()
    for t in (1.0, 2.0, 3.0, 4.0):
        times.add(t, now=0.0)
    assert times.left(ran=0.5, q=0.5, now=1.0, occupancy=1) == 1.5  # median of all, less 0.5
    assert times.left(ran=2.5, q=0.9, now=1.0, occupancy=1) == 1.5  # of the 3 s and 4 s ones
    # Longer than any seen: it is slow, so about another median.
    assert times.left(ran=5.0, q=0.9, now=1.0, occupancy=1) == 2.0
    assert ServiceTimes().left(ran=1.0, q=0.9, now=1.0, occupancy=1) == 0.0


def test_a_judgment_is_expected_to_take_the_rest_plus_its_new_characters_at_the_judges_speed(
) -> None:
    times = ServiceTimes()
    # Cached judgments (a same text again): 0.1 s evaluating 2 new tokens, 0.5 s the rest.
    for _ in range(8):
        times.add(0.6, now=0.0, prompt=PromptEval(0.1, 2, 298), prompt_chars=1200)
    # Not a speed sample (too few tokens): without one, a judgment is expected to take what the
    # judgments took, whatever its size.
    assert times.quantile(0.9, now=1.0, new_chars=1000) == pytest.approx(0.6)
    # One new text: 250 of its 300 tokens (1,200 characters) evaluated in 2 s, so 8 ms a token
    # and 4 characters a token: 2 ms a character.
    times.add(2.5, now=1.0, prompt=PromptEval(2.0, 250, 50), prompt_chars=1200)
    # A cached judgment stays fast, a new text of 500 characters takes its 1 s more, and the
    # cached spell does not make a 1,000-character one look fast.
    assert times.quantile(0.9, now=2.0, new_chars=2) == pytest.approx(0.504)
    assert times.quantile(0.9, now=2.0, new_chars=500) == pytest.approx(1.5)
    assert times.quantile(0.9, now=2.0, new_chars=1000) == pytest.approx(2.5)
    # Without a size, as before: the quantiles of what the judgments took.
    assert times.quantile(0.5, now=2.0) == pytest.approx(0.6)
    assert times.quantile(1.0, now=2.0) == pytest.approx(2.5)
    # Two at once on a CPU judge: the speed and the rest both scaled, until seen.
    assert times.quantile(0.9, now=2.0, occupancy=2, new_chars=500) == pytest.approx(3.0)


def test_the_judges_speed_outlives_a_spell_of_cached_judgments() -> None:
    times = ServiceTimes(memory_s=60.0, rate_memory_s=600.0)
    times.add(2.5, now=0.0, prompt=PromptEval(2.0, 250, 50), prompt_chars=1200)
    for t in range(100, 600, 10):
        times.add(0.6, now=float(t), prompt=PromptEval(0.1, 2, 298), prompt_chars=1200)
        if t == 400:
            assert times.quantile(0.9, now=400.0, new_chars=1000) == pytest.approx(2.5)
    assert times.quantile(0.9, now=601.0, new_chars=1000) == pytest.approx(0.6)  # forgotten


@pytest.mark.parametrize(("ahead", "free", "busy_left", "wait"), [
    (0, 1, [0.3], 0.0),  # a free slot: no wait
    (1, 2, [], 0.0),  # one ahead takes the first free slot, this one the second
    (0, 0, [0.3, 0.1], 0.1),  # all busy: the slot that frees first
    (1, 0, [0.3, 0.1], 0.3),  # ... is the one ahead's; this one gets the second
    (2, 0, [0.3, 0.1], 0.6),  # a round later: the first slot again, after a judgment
    (5, 0, [0.3, 0.1], 1.3),
    (3, 1, [0.2], 0.7),  # one free, one busy: a round on, the busy one's turn again
    (0, 0, [-0.4, 0.2], 0.0),  # running longer than expected: about to end
])
def test_expected_wait_follows_the_slots_as_they_free_up(
    ahead: int, free: int, busy_left: list[float], wait: float
) -> None:
    assert expected_wait(ahead, free, busy_left, typical_s=0.5) == pytest.approx(wait)


def test_a_judge_without_slots_has_no_wait_that_ends() -> None:
    assert expected_wait(0, 0, [], 0.5) == math.inf


def test_a_judgment_is_shed_when_wait_and_service_overrun_its_budget() -> None:
    assert not sheds(remaining_s=5.0, wait_s=0.0, service_p90_s=0.8)
    assert not sheds(remaining_s=5.0, wait_s=4.2, service_p90_s=0.8)  # just fits
    assert sheds(remaining_s=5.0, wait_s=4.3, service_p90_s=0.8)
    assert sheds(remaining_s=0.5, wait_s=0.0, service_p90_s=0.8)  # its turn came too late
    assert sheds(remaining_s=-1.0, wait_s=0.0, service_p90_s=0.0)  # past its deadline
    assert not sheds(remaining_s=0.001, wait_s=0.0, service_p90_s=0.0)  # nothing known yet
    # On arrival, a tenth of the budget to spare.
    assert not sheds(remaining_s=5.0, wait_s=3.7, service_p90_s=0.8, headroom=0.1)
    assert sheds(remaining_s=5.0, wait_s=3.8, service_p90_s=0.8, headroom=0.1)


# --- slots ---------------------------------------------------------------------------------------


def test_never_more_judgments_on_a_replica_than_it_has_slots() -> None:
    b = book(r1=2, r2=1)
    taken = [b.take(prompt(f"judgment {i}")) for i in range(3)]
    assert all(s is not None for s in taken)
    assert b.take(prompt("a fourth")) is None
    assert b.in_flight("r1") == 2 and b.in_flight("r2") == 1 and b.free == 0
    assert {(s.replica, s.index) for s in taken if s} == {("r1", 0), ("r1", 1), ("r2", 0)}


def test_a_slot_given_back_is_free_at_once() -> None:
    b = book(r1=1)
    slot = b.take(prompt("one"))
    assert slot is not None and b.take(prompt("two")) is None
    b.give_back(slot, now=5.0)
    assert b.free == 1 and b.take(prompt("two")) is slot


def test_replicas_come_and_go_with_their_slots() -> None:
    b = book(r1=2)
    running = b.take(prompt("on r1"))
    assert running is not None
    b.sync({"r2": 1, "r1": 1})  # r1 restarted with one slot, r2 came up
    assert b.total == 2 and b.busy == 1
    b.sync({"r2": 1})  # r1 is gone: its judgment gives its slot back to nothing
    b.give_back(running, now=1.0)
    assert b.total == 1 and b.free == 1


def test_new_work_spreads_over_replicas_before_doubling_up() -> None:
    b = book(r1=2, r2=2)
    first = b.take(prompt("first"))
    second = b.take(prompt("second"))
    assert first is not None and second is not None and first.replica != second.replica


def test_a_judgment_goes_to_the_slot_whose_cache_holds_the_most_of_its_prompt() -> None:
    b = book(r1=2, r2=1)
    window_1 = prompt("USER: hi\n\nASSISTANT: Once upon a time")
    a = b.take(window_1)
    other = b.take(prompt("USER: something else entirely"))
    assert a is not None and other is not None
    b.give_back(a, now=1.0)
    b.give_back(other, now=2.0)
    # The stream's next window shares all the text judged before: it goes back to that slot,
    # though another slot was used more recently and a replica has nothing in flight.
    again = b.take(window_1 + " there was a judge")
    assert again is a


def busy_and_idle_replica(held_by_free_slot: str) -> SlotBook:
    """r1 runs one judgment and has a free slot whose cache holds `held_by_free_slot`; r2 runs
    nothing, and its slot's cache holds another distinct text."""
    b = book(r1=2, r2=1)
    (r1a, r1b), (r2a,) = b.replicas["r1"], b.replicas["r2"]
    b.claim(r1a, prompt("Request 10: a"), now=0.0)
    b.claim(r1b, prompt(held_by_free_slot), now=0.0)
    b.claim(r2a, prompt("Request 20: c"), now=0.0)
    b.give_back(r1b, now=1.0)
    b.give_back(r2a, now=1.0)
    return b


def test_a_few_characters_more_in_a_busy_replicas_cache_lose_to_a_replica_with_none_in_flight(
) -> None:
    # "Request 11: " against "Request ": as good as each other. Beside a running judgment the new
    # one would take twice as long.
    b = busy_and_idle_replica("Request 11: b")
    picked = b.pick(prompt("Request 11: d"))
    assert picked is not None and picked[0].replica == "r2" and picked[1] == 1


def test_a_cache_holding_much_more_of_the_prompt_wins_over_a_replica_with_none_in_flight() -> None:
    conversation = "Request 11: " + "a long conversation, judged window by window. " * 3
    b = busy_and_idle_replica(conversation)
    picked = b.pick(prompt(conversation + "And its next window."))
    assert picked is not None and picked[0].replica == "r1" and picked[1] == 2


def test_the_least_recently_used_slot_goes_first_when_caches_hold_as_much() -> None:
    b = book(r1=2)
    s0, s1 = b.take(prompt("x")), b.take(prompt("y"))
    assert s0 is not None and s1 is not None
    b.give_back(s1, now=1.0)
    b.give_back(s0, now=2.0)
    assert b.take(prompt("z")) is s1


@pytest.mark.parametrize(("a", "b", "n"), [
    ("", "", 0), ("abc", "", 0), ("abc", "abd", 2), ("abc", "abc", 3), ("abc", "abcdef", 3),
    (HEAD + "1", HEAD + "2", len(HEAD)),
])
def test_shared_prefix(a: str, b: str, n: int) -> None:
    assert shared_prefix(a, b) == n == shared_prefix(b, a)


def test_a_busy_slot_knows_how_long_its_judgment_has_run_and_what_was_new() -> None:
    b = book(r1=2)
    first = b.take(prompt("first"), now=10.0)
    assert first is not None
    b.take(prompt("second"), now=10.5)
    # Both ran two at once on r1 (the first alone at first, but beside the second since).
    assert sorted(s.occupancy for s in b.replicas["r1"]) == [2, 2]
    # Both slots were cold: all of each prompt was new to them.
    assert sorted(b.running(11.0)) == [(0.5, len(prompt("second"))), (1.0, len(prompt("first")))]
    b.give_back(first, now=12.0)
    again = b.take(prompt("first, and more"), now=12.0)
    assert again is first and first.new_chars == len(", and more")
    # Waiting, a judgment expects to be as new as to the slot sharing the most of it.
    assert b.uncached(prompt("second thoughts")) == len(" thoughts")
