"""Demand → how many replicas a model wants (pure): cold starts, autoscaling and idle stops.

The keeper asks this for every local model on every pass, with the cluster's merged `Activity`
(what waits in the servers' queues, what is in flight on each replica). The answer is a count
between `scaling.min` and `scaling.max`, and which idle replicas go:

- a queue for a model with no replica at all is a cold start: it wants one, at once;
- queued and in-flight requests per ready replica above `scale_up_load`, sustained for
  `scale_up_after_s`, add one replica (never while another is still starting);
- a replica above `min` that served nothing for `idle_s` stops, least recently used first,
  never one with requests in flight and never while the model has a queue; a judge keeps one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from llmgw.core.demand import Activity, loading_on
from llmgw.core.settings import ControlSettings
from llmgw.core.types import Model, Replica, ReplicaState
from llmgw.engines import crashes


@dataclass(frozen=True)
class Want:
    """What one model wants from the keeper on this pass."""

    # Replicas it should have (stopping ones aside), between scaling.min and scaling.max.
    replicas: int
    # Replicas to stop because they are idle, least recently used first, with the reason.
    idle: tuple[tuple[str, str], ...] = ()
    # The model has no replica and requests wait for it: the replica placed now is a cold start.
    cold: bool = False
    # Since when its load has stayed above the threshold (None: it has not), for the next pass.
    busy_since: datetime | None = None
    # Requests waiting for it across the servers.
    queued: int = 0


@dataclass(frozen=True)
class Load:
    """A model's requests as the replica counts see them."""

    queued: int
    in_flight: int
    ready: int
    starting: int
    live: int


def last_use(replica: Replica, activity: Activity) -> datetime | None:
    """When `replica` last got a request, or, if no server has sent it one, when its row last
    changed (it became ready): an engine nobody has used is idle since it started."""
    use = activity.replicas.get(replica.id)
    used = use.last_used if use is not None else None
    since = replica.updated_at
    if used is None:
        return since
    return used if since is None else max(used, since)


def in_flight(replica_id: str, activity: Activity) -> int:
    """Requests in flight on a replica across the servers."""
    use = activity.replicas.get(replica_id)
    return use.in_flight if use is not None else 0


def load(model: Model, mine: list[Replica], activity: Activity) -> Load:
    """Count a model's replicas (stopping ones aside) and the requests for them."""
    live = [r for r in mine if r.state != ReplicaState.STOPPING]
    ready = [r for r in live if r.state == ReplicaState.READY and r.node_id is not None]
    starting = [r for r in live if r.state in (ReplicaState.STARTING, ReplicaState.PENDING)]
    q = activity.queued.get(model.name)
    return Load(
        queued=q.waiting if q is not None else 0,
        in_flight=sum(in_flight(r.id, activity) for r in live),
        ready=len(ready),
        starting=len(starting),
        live=len(live),
    )


def want(
    model: Model,
    mine: list[Replica],
    activity: Activity,
    now: datetime,
    settings: ControlSettings,
    busy_since: datetime | None = None,
) -> Want:
    """How many replicas `model` wants given its replicas `mine` and the cluster's demand."""
    sc = model.scaling
    n = load(model, mine, activity)
    live = [r for r in mine if r.state != ReplicaState.STOPPING]
    heavy = bool(n.ready) and (n.queued + n.in_flight) / max(n.ready, 1) > settings.scale_up_load
    # A replica pending for want of room is kept only while demand is there (or `min` needs it):
    # once its waiters have had their answer it goes, so the next request queues and tries again
    # (room may have been freed by then) rather than failing on a stale reason for ever.
    unwanted = 0 if n.queued or heavy else sum(1 for r in live if r.node_id is None)
    count = n.live - unwanted
    # Above max: scaled down by an operator; `plan` picks which go.
    target = min(max(count, sc.min), sc.max)
    placed = any(r.node_id is not None and r.state in (ReplicaState.STARTING, ReplicaState.READY)
                 for r in live)
    if n.queued and not placed and sc.max > 0:
        # A cold start: requests wait and nothing is even loading. A pending replica that fits
        # nowhere yet is the one to place (the keeper may make room for it).
        return Want(max(target, 1), cold=True, queued=n.queued)
    busy: datetime | None = None
    if heavy and not n.starting:
        busy = busy_since or now
        if (now - busy).total_seconds() >= settings.scale_up_after_s and count < sc.max:
            # One at a time: the next is added only once this one is ready and the load stays.
            return Want(min(count + 1, sc.max), queued=n.queued)
        return Want(target, busy_since=busy, queued=n.queued)
    # A judge keeps one replica however idle: the guard's budget does not wait for a cold start.
    floor = max(sc.min, 1) if model.guard else sc.min
    if sc.idle_s is None or n.queued or count <= floor:
        return Want(target, queued=n.queued)
    idle: list[tuple[datetime, str]] = []
    for r in live:
        # A failed replica serves nothing either; one still starting is not idle yet.
        if r.state not in (ReplicaState.READY, ReplicaState.FAILED) or in_flight(r.id, activity):
            continue
        since = last_use(r, activity)
        if since is not None and (now - since).total_seconds() >= sc.idle_s:
            idle.append((since, r.id))
    idle.sort()
    gone = idle[: max(min(len(idle), count - floor), 0)]
    reasons = tuple(
        (rid, f"{model.name} served nothing for {ago((now - since).total_seconds())} "
              f"(idle after {ago(sc.idle_s)}, min {sc.min})")
        for since, rid in gone
    )
    return Want(max(min(count - len(gone), sc.max), sc.min), idle=reasons, queued=n.queued)


def wants(
    models: list[Model],
    replicas: list[Replica],
    activity: Activity,
    now: datetime,
    settings: ControlSettings,
    busy_since: Mapping[str, datetime] | None = None,
) -> dict[str, Want]:
    """`want` for every local model."""
    by_model: dict[str, list[Replica]] = {}
    for r in replicas:
        by_model.setdefault(r.model, []).append(r)
    busy = busy_since or {}
    return {
        m.name: want(m, by_model.get(m.name, []), activity, now, settings, busy.get(m.name))
        for m in models if not m.is_remote
    }


def ago(seconds: float) -> str:
    """A duration the way a table shows it: 45s, 3m, 2h, 4d."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def state(model: Model, replicas: list[Replica], activity: Activity, now: datetime) -> str:
    """A model's on-demand state for `ctl model list`: cold, pending, loading on NODE, ready,
    idle 3m (ready, nothing served for that long), failing: WHY (every replica's engine keeps
    dying, restarts going on), failed: WHY (given up on), or failed."""
    if model.is_remote:
        return "remote"
    live = [r for r in replicas if r.model == model.name and r.state != ReplicaState.STOPPING]
    ready = [r for r in live if r.state == ReplicaState.READY]
    if ready:
        if any(in_flight(r.id, activity) for r in ready):
            return "ready"
        used = [t for r in ready if (t := last_use(r, activity)) is not None]
        if not used:
            return "ready"
        quiet = (now - max(used)).total_seconds()
        return f"idle {ago(quiet)}" if quiet >= 60 else "ready"
    crashing = [r for r in live if r.state == ReplicaState.FAILED or (
        r.state == ReplicaState.STARTING and (r.last_error or "").startswith(crashes.RESTARTING))]
    if live and len(crashing) == len(live) and any(r.last_error for r in crashing):
        # A crash loop is said as one, with what the engine died of: not as a slow start.
        given_up = all((r.last_error or "").startswith(crashes.GAVE_UP) for r in crashing)
        why = crashes.headline(next(r.last_error for r in crashing if r.last_error))
        return f"{'failed' if given_up else 'failing'}: {why}"
    loading = loading_on(live)
    if loading:
        return f"loading on {', '.join(loading)}"
    if any(r.node_id is None for r in live):
        return "pending"
    if live:
        return "failed"
    return "cold"
