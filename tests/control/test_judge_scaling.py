"""Judge autoscaling's decision with plain data and a fake clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from llmgw.control.judge_scaling import (
    JUDGE_IDLE,
    JUDGE_SCALE_WINDOW,
    JudgeCapacity,
    JudgeScale,
    Scale,
    decide,
)
from llmgw.core.guard import JudgeLoad
from tests.factories import NOW

JUDGE = "qwen3guard-0.6b"
LOOK = timedelta(seconds=5)  # the keeper's interval


def capacity(*, live: int = 2, floor: int = 2, most: int = 4, starting: int = 0, room: bool = True,
             **load: int) -> JudgeCapacity:
    return JudgeCapacity(floor=floor, most=most, live=live, starting=starting, room=room,
                         load=JudgeLoad(slots=2 * live, **load))


def looks(caps: list[JudgeCapacity], start: datetime = NOW, before: JudgeScale | None = None
          ) -> tuple[list[Scale], JudgeScale, datetime]:
    """One look every LOOK with each capacity in turn: the scales decided, the last memory and
    the time of the last look."""
    scales: list[Scale] = []
    now = start
    for i, cap in enumerate(caps):
        now = start + i * LOOK
        action, before = decide(JUDGE, cap, before, now)
        if action is not None:
            scales.append(action)
    assert before is not None
    return scales, before, now


def queueing(n: int, *, live: int = 2, **over: object) -> list[JudgeCapacity]:
    """`n` looks at a judge whose judgments wait for a slot the whole time (the counter grows)."""
    return [replace(capacity(live=live, queued=3, waited=10 * (i + 1)), **over) for i in range(n)]


def test_a_queue_sustained_for_the_window_adds_one_replica() -> None:
    within = JUDGE_SCALE_WINDOW // LOOK  # looks spanning less than the window
    scales, memory, _ = looks(queueing(within))
    assert scales == [] and memory.replicas == 2 and "pressed since" in memory.note
    scales, memory, _ = looks(queueing(within + 1))
    [added] = scales
    assert added.judge == JUDGE and added.replicas == 3
    assert "queued or shed for 30 s" in added.reason and memory.replicas == 3


def test_another_window_passes_before_the_next_replica() -> None:
    n = JUDGE_SCALE_WINDOW // LOOK + 1
    scales, memory, now = looks(queueing(n))
    assert [s.replicas for s in scales] == [3]
    more, memory, _ = looks(queueing(n, live=3), start=now + LOOK, before=memory)
    assert [s.replicas for s in more] == [4]


def test_sheds_alone_are_pressure_too() -> None:
    # The first look only learns the counter: the window runs from the second.
    caps = [capacity(shed=5 * (i + 1)) for i in range(JUDGE_SCALE_WINDOW // LOOK + 2)]
    scales, _, _ = looks(caps)
    assert [s.replicas for s in scales] == [3]


def test_a_calm_look_restarts_the_window() -> None:
    n = JUDGE_SCALE_WINDOW // LOOK
    caps = [*queueing(n - 1), capacity(waited=10 * (n - 1)), *queueing(n)]
    scales, _, _ = looks(caps)
    assert scales == []


def test_the_first_look_counts_no_old_sheds_and_a_restarted_server_counts_from_zero() -> None:
    _, memory = decide(JUDGE, capacity(shed=500, waited=900), None, NOW)
    assert memory.pressed_since is None  # counters since the server started are no evidence
    _, memory = decide(JUDGE, capacity(shed=3), memory, NOW + LOOK)  # counters went down
    assert memory.pressed_since == NOW + LOOK


def test_never_above_max() -> None:
    scales, memory, _ = looks(queueing(20, live=4))
    assert scales == [] and memory.replicas == 4
    assert "at max" in memory.note and f"llmgw ctl model scale {JUDGE} --max" in memory.note


def test_no_replica_where_the_scheduler_has_no_room() -> None:
    scales, memory, _ = looks([replace(c, room=False) for c in queueing(20)])
    assert scales == [] and "no room" in memory.note


def test_no_second_replica_while_one_is_starting() -> None:
    scales, memory, _ = looks([replace(c, starting=1) for c in queueing(20)])
    assert scales == [] and "starting" in memory.note


def test_calm_for_the_idle_time_removes_one_replica_never_below_the_floor() -> None:
    calm_looks = JUDGE_IDLE // LOOK
    memory = JudgeScale(replicas=4)
    scales, memory, now = looks([capacity(live=4)] * calm_looks, before=memory)
    assert scales == []
    scales, memory, now = looks([capacity(live=4)] * 2, start=now + LOOK, before=memory)
    assert [s.replicas for s in scales] == [3] and "no judgment queued or shed" in scales[0].reason
    # Down to the floor of 2, one idle period at a time, and no further.
    scales, memory, _ = looks([capacity(live=3)] * (3 * calm_looks), start=now + LOOK,
                              before=memory)
    assert [s.replicas for s in scales] == [2] and memory.replicas == 2


def test_a_judge_with_a_floor_of_zero_still_keeps_one() -> None:
    memory = JudgeScale(replicas=1)
    scales, memory, _ = looks([capacity(live=1, floor=0)] * (3 * JUDGE_IDLE // LOOK), before=memory)
    assert scales == [] and memory.replicas == 1


def test_an_operator_lowering_max_is_followed() -> None:
    memory = JudgeScale(replicas=4)
    _, memory = decide(JUDGE, capacity(live=4, most=2), memory, NOW)
    assert memory.replicas == 2
