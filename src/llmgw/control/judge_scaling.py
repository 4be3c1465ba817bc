"""Judge autoscaling, decided purely: how many replicas each judge should have.

The gateways admit judgments to their judges' slots and report, per judge, what waits and what
they shed (`JudgeLoad` in each server's activity, summed over the live servers). A judge is
*pressed* on a look when judgments wait for a slot now, or waited or were shed since the last
look. Pressed on every look for `window`, it gets one more replica, up to its catalog entry's
`scaling.max`, when the scheduler finds room for it and none is still starting; then another
window must pass before the next. A judge that was not pressed for `idle` loses one replica,
never going below its `scaling.min` (2 for the judges the keeper serves) and never to zero.

The replica keeper places and stops the replicas: the judge keeper hands it each judge's count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from llmgw.core.guard import JudgeLoad

# Judgments queued or shed this long add a replica; none queued or shed this long remove one.
JUDGE_SCALE_WINDOW = timedelta(seconds=30)
JUDGE_IDLE = timedelta(minutes=5)


@dataclass(frozen=True)
class JudgeScale:
    """What the keeper remembers about one judge's scale between looks."""

    replicas: int
    pressed_since: datetime | None = None
    calm_since: datetime | None = None
    seen: JudgeLoad | None = None  # the counters at the last look
    note: str = ""  # what the last look decided, for `ctl guard judge status`


@dataclass(frozen=True)
class JudgeCapacity:
    """One judge as a look sees it."""

    floor: int  # scaling.min
    most: int  # scaling.max
    live: int  # replicas not stopping
    starting: int  # replicas placed or pending, not ready yet
    room: bool  # whether the scheduler could place one more now
    load: JudgeLoad


@dataclass(frozen=True)
class Scale:
    """Give a judge this many replicas."""

    judge: str
    replicas: int
    reason: str


def _since_last(load: JudgeLoad, seen: JudgeLoad | None) -> tuple[int, int]:
    """Judgments that waited and that were shed since the last look. A counter that went down
    (a server restarted or left) counts from zero; the first look only sets the baseline."""
    if seen is None:
        return 0, 0
    waited = load.waited - seen.waited if load.waited >= seen.waited else load.waited
    shed = load.shed - seen.shed if load.shed >= seen.shed else load.shed
    return waited, shed


def decide(
    judge: str, cap: JudgeCapacity, before: JudgeScale | None, now: datetime,
    window: timedelta = JUDGE_SCALE_WINDOW, idle: timedelta = JUDGE_IDLE,
) -> tuple[Scale | None, JudgeScale]:
    """This look's decision for `judge`, and what to remember for the next."""
    floor = max(cap.floor, 1)
    most = max(cap.most, floor)
    wanted = before.replicas if before is not None else cap.live
    wanted = min(max(wanted, floor), most)
    waited, shed = _since_last(cap.load, before.seen if before else None)
    load = cap.load
    pressed = load.queued > 0 or waited > 0 or shed > 0
    scale = before or JudgeScale(replicas=wanted)
    scale = replace(scale, replicas=wanted, seen=load)
    of = f"{wanted} of max {most}"
    if pressed:
        since = (before.pressed_since if before else None) or now
        scale = replace(scale, pressed_since=since, calm_since=None)
        what = f"{load.queued} waiting now, {waited} waited and {shed} shed since the last look"
        if now - since < window:
            return None, replace(scale, note=f"{of}; pressed since {_at(since)} ({what})")
        if wanted >= most:
            return None, replace(scale, note=f"{of}; at max while pressed ({what}): raise "
                                             f"it with llmgw ctl model scale {judge} --max N")
        if cap.starting:
            return None, replace(scale, note=f"{of}; pressed, waiting for a starting replica")
        if not cap.room:
            return None, replace(scale, note=f"{of}; pressed, and the scheduler has no room for "
                                             "another replica")
        reason = f"judgments queued or shed for {_span(now - since)} ({what})"
        return (Scale(judge, wanted + 1, reason),
                replace(scale, replicas=wanted + 1, pressed_since=now,
                        note=f"{wanted + 1} of max {most}; added one: {reason}"))
    calm = (before.calm_since if before else None) or now
    scale = replace(scale, pressed_since=None, calm_since=calm)
    if wanted > floor and now - calm >= idle:
        reason = f"no judgment queued or shed for {_span(now - calm)}"
        return (Scale(judge, wanted - 1, reason),
                replace(scale, replicas=wanted - 1, calm_since=now,
                        note=f"{wanted - 1} of max {most}; removed one: {reason}"))
    return None, replace(scale, note=f"{of}; calm since {_at(calm)}")


def _span(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s} s" if s < 120 else f"{s // 60} min"


def _at(t: datetime) -> str:
    return t.isoformat(timespec="seconds")
