"""Demand for models, as each server sees it and the leader's keeper reads it.

Every server keeps its own `Activity` in memory (what waits in its queues, which replicas it sends
requests to) and writes it to the store about once a second; the leader merges the live servers'
activities into one view before planning. A queue that forms for a model with no ready replica
is written at once, and wakes the leader, so a cold start never waits for the next pass.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from llmgw.core.guard import JudgeLoad
from llmgw.core.types import Frozen, Replica, ReplicaState, UtcDatetime

# How a pending replica's last error starts when its model fits once replicas of other models
# finish their requests (they are stopped then to make room): its requests keep waiting, unlike
# those of a model that fits nowhere, which get their 503 at once.
WAITING_FOR_ROOM = "waiting for room"
# How often a server writes its activity while it changes (a queue that forms is written at
# once): the requests in flight the leader sees on a replica may be this much out of date.
REPORT_S = 1.0


class Queued(Frozen):
    """Requests waiting for a model on one server (or merged across servers)."""

    waiting: int = Field(default=0, ge=0)
    # When the oldest of them arrived.
    since: UtcDatetime | None = None


class ReplicaUse(Frozen):
    """How one replica is being used: requests in flight now, and when it last got one."""

    in_flight: int = Field(default=0, ge=0)
    last_used: UtcDatetime | None = None


class Activity(Frozen):
    """One server's demand (or the merge of several): queues by model, use by replica id."""

    queued: dict[str, Queued] = Field(default_factory=dict)
    replicas: dict[str, ReplicaUse] = Field(default_factory=dict)
    # Judgments by judge: slots, queue and counters of the gateway's judge admission.
    judges: dict[str, JudgeLoad] = Field(default_factory=dict)
    # When the server wrote it; a server whose heartbeat is gone is left out of the merge.
    at: UtcDatetime | None = None


class Evicted(Frozen):
    """A replica the keeper stopped to make room for another model (kept for `model resources`)."""

    at: UtcDatetime
    replica: str
    model: str
    node: str
    room_for: str
    reason: str


def loading_on(replicas: list[Replica]) -> list[str]:
    """The nodes where replicas among `replicas` are starting, sorted."""
    return sorted({r.node_id for r in replicas if r.state == ReplicaState.STARTING and r.node_id})


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def merge(activities: list[Activity]) -> Activity:
    """The cluster's demand: queues and in-flight counts add up; times take the oldest waiter
    and the latest use."""
    queued: dict[str, Queued] = {}
    replicas: dict[str, ReplicaUse] = {}
    judges: dict[str, JudgeLoad] = {}
    at: datetime | None = None
    for act in activities:
        at = _later(at, act.at)
        for judge, load in act.judges.items():
            judges[judge] = judges[judge].plus(load) if judge in judges else load
        for model, q in act.queued.items():
            old = queued.get(model, Queued())
            queued[model] = Queued(waiting=old.waiting + q.waiting, since=_earlier(old.since, q.since))
        for rid, use in act.replicas.items():
            old_use = replicas.get(rid, ReplicaUse())
            replicas[rid] = ReplicaUse(in_flight=old_use.in_flight + use.in_flight,
                                       last_used=_later(old_use.last_used, use.last_used))
    return Activity(queued={m: q for m, q in queued.items() if q.waiting}, replicas=replicas,
                    judges=judges, at=at)
