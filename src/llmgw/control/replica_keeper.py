"""The replica keeper: keeps `scaling.min` replicas of every local model placed, and, given the
cluster's demand, starts on-demand models, autoscales them and stops idle replicas.

`plan` is pure: catalog, nodes, replicas (and demand) in, actions out. `ReplicaKeeper` reads the
store, calls `plan`, writes the actions back and logs each once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypedDict

from llmgw.control import eviction
from llmgw.control.demand import Want, wants

# NODE_TIMEOUT is re-exported: callers have always found it here.
from llmgw.control.placement import NODE_TIMEOUT as NODE_TIMEOUT
from llmgw.control.placement import lost
from llmgw.control.scheduler import Cluster, Unschedulable
from llmgw.control.scheduler import Placement as Where
from llmgw.core.clock import Clock
from llmgw.core.demand import REPORT_S, WAITING_FOR_ROOM, Activity
from llmgw.core.ids import new_id
from llmgw.core.loops import every
from llmgw.core.settings import ControlSettings
from llmgw.core.types import Model, Node, Replica, ReplicaState

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Place:
    """Put a replica on a node: a new one, or a pending one (`replica_id`) that now fits."""

    model: str
    node_id: str
    profile: str
    cpu_cores: int
    memory_gb: float
    replica_id: str | None = None
    gpu_class: str | None = None
    gpus: int = 0
    # The node's GPUs it runs on (UUIDs), `gpus` of them.
    devices: tuple[str, ...] = ()
    # Requests wait for the model and nothing of it was loading: a cold start.
    cold: bool = False

    def placement(self) -> Placement:
        """The replica's fields this placement sets, on a new replica or a pending one."""
        return Placement(node_id=self.node_id, profile=self.profile, state=ReplicaState.STARTING,
                         cpu_cores=self.cpu_cores, memory_gb=self.memory_gb,
                         gpu_class=self.gpu_class, gpus=self.gpus, devices=list(self.devices))


class Placement(TypedDict):
    """What placing a replica on a node writes on it."""

    node_id: str
    profile: str
    state: ReplicaState
    cpu_cores: int
    memory_gb: float
    gpu_class: str | None
    gpus: int
    devices: list[str]


@dataclass(frozen=True)
class Pend:
    """A replica that fits nowhere: record it as pending with the reason."""

    model: str
    reason: str
    replica_id: str | None = None


@dataclass(frozen=True)
class Stop:
    """A replica that is no longer wanted."""

    replica_id: str
    reason: str
    # The model this replica makes room for (swap by memory), None for any other stop.
    room_for: str | None = None
    # With `room_for`: the stopped replica's own model and node (for the log and metrics).
    model: str | None = None
    node_id: str | None = None


@dataclass(frozen=True)
class Forget:
    """A replica on a node that is lost: its row goes (nothing there can stop it), so traffic
    stops going to it and a new replica is placed elsewhere. Should the node come back, its
    agent stops the engine, which is no longer assigned to it."""

    replica_id: str
    reason: str


Action = Place | Pend | Stop | Forget


class Plan(list[Action]):
    """A pass's actions, since when each model's load has stayed above the scale-up threshold
    (what the next pass is given as `busy_since`), and how soon the keeper should look again
    when that is sooner than its interval (`look_again_s`; None: at its interval)."""

    def __init__(self, actions: list[Action], busy_since: dict[str, datetime],
                 look_again_s: float | None = None) -> None:
        super().__init__(actions)
        self.busy_since = busy_since
        self.look_again_s = look_again_s


def plan(
    models: list[Model],
    nodes: list[Node],
    replicas: list[Replica],
    now: datetime,
    node_timeout: timedelta = NODE_TIMEOUT,
    leading_since: datetime | None = None,
    judge_machine: Mapping[str, str] | None = None,
    activity: Activity | None = None,
    settings: ControlSettings | None = None,
    busy_since: Mapping[str, datetime] | None = None,
    judge_targets: Mapping[str, int] | None = None,
) -> Plan:
    """What to change so each local model has `scaling.min` replicas placed where they fit
    (other than judges, on the `judge_machine` only when nothing else fits).

    Replicas on a lost node (no heartbeat within `node_timeout`, or no node row) are forgotten
    and a replacement is placed elsewhere. Replicas on a draining node make way the other way
    round: their replacements are placed first, and they stop once enough of the model's
    replicas are ready elsewhere, so a drain never leaves a model without a ready replica.

    Given the cluster's `activity` (see `control.demand`), a model has between `scaling.min`
    and `scaling.max` replicas as its demand says: a queue starts a cold model at once, load
    sustained per ready replica adds one, idle replicas above `min` stop; a model with requests
    waiting that fits nowhere may stop idle replicas of other models on one node to fit there
    (see `control.eviction`). `busy_since` is the previous pass's `Plan.busy_since`.

    `judge_targets` (the judge keeper's, which scales judges with their judgments) sets how many
    replicas those judges have, within their `scaling.min` and `scaling.max`.

    While a model waits for room behind replicas that look busy, the plan asks to be made again
    after `REPORT_S` (`Plan.look_again_s`) rather than at the keeper's interval."""
    # Silence from before this leader's election (`leading_since`) is not held against a node:
    # after a database outage or a leader change every heartbeat is old though no node is gone,
    # and forgetting their replicas would restart every engine. A node that really is gone is
    # still lost `node_timeout` after the election.
    catalog = {m.name: m for m in models}
    by_id = {n.id: n for n in nodes}
    gone: dict[str, str | None] = {}
    actions: list[Action] = []
    mine: dict[str, list[Replica]] = {}
    leaving: dict[str, list[Replica]] = {}
    kept: list[Replica] = []
    for r in replicas:
        if r.node_id is not None:
            if r.node_id not in gone:
                gone[r.node_id] = _gone(by_id.get(r.node_id), r.node_id, now, node_timeout,
                                        leading_since)
            why = gone[r.node_id]
            if why is not None:
                # Even a stopping replica: nothing on a lost node will ever finish stopping it.
                actions.append(Forget(r.id, why))
                continue
        kept.append(r)
        if r.state == ReplicaState.STOPPING:
            if r.node_id is None:  # no agent will ever report it stopped (earlier versions)
                actions.append(Forget(r.id, "it was never placed"))
            continue
        model = catalog.get(r.model)
        if model is None or model.is_remote:
            actions.append(_drop(r, f"model {r.model} is no longer in the catalog"))
        elif r.node_id is not None and by_id[r.node_id].draining:
            leaving.setdefault(r.model, []).append(r)
        else:
            mine.setdefault(r.model, []).append(r)
    cluster = Cluster(nodes, replicas, now, node_timeout, judge_machine, leading_since, models)
    demand: dict[str, Want] = {}
    if activity is not None:
        live = [r for rs in mine.values() for r in rs]
        demand = wants(models, live, activity, now, settings or ControlSettings(), busy_since)
    for name, n in (judge_targets or {}).items():
        judge = catalog.get(name)
        if judge is None or not judge.guard or judge.is_remote:
            continue
        n = min(max(n, judge.scaling.min), judge.scaling.max)
        w = demand.get(name)
        demand[name] = replace(w, replicas=n, idle=()) if w is not None else Want(n)
    room = _Room(catalog, kept, activity) if activity is not None else None
    # Models with requests waiting go first: they may stop idle replicas of others to fit, and
    # those others then plan without them.
    for model in sorted(catalog.values(), key=lambda m: (not _queued(demand, m.name), m.name)):
        if not model.is_remote:
            have = [r for r in mine.get(model.name, []) if room is None or r.id not in room.taken]
            w = demand.get(model.name)
            if w is not None and room is not None and len(have) < len(mine.get(model.name, [])):
                # Its replicas stopped to make room are not replaced (nobody waits for it); one
                # that was idle anyway already counts as gone.
                idle = tuple((rid, why) for rid, why in w.idle if rid not in room.taken)
                taken = len(mine[model.name]) - len(have) - (len(w.idle) - len(idle))
                w = replace(w, replicas=max(w.replicas - taken, model.scaling.min), idle=idle)
            actions += _keep(model, have, cluster, w, room)
            actions += _make_way(model, have, leaving.get(model.name, []))
    busy = {name: w.busy_since for name, w in demand.items() if w.busy_since is not None}
    # The replicas a model waits behind look busy as of each server's last activity write:
    # their last request may well be over already (a swap's usual case: the request for B comes
    # right after A's last one ended), and its end is written within REPORT_S. At the keeper's
    # interval the waiting requests would wait up to that long instead.
    look_again = REPORT_S if room is not None and room.behind_busy else None
    return Plan(actions, busy, look_again)


def _queued(demand: Mapping[str, Want], name: str) -> bool:
    w = demand.get(name)
    return w is not None and w.queued > 0


class _Room:
    """What one plan needs to make room for a model by stopping idle replicas of others."""

    def __init__(self, catalog: Mapping[str, Model], replicas: list[Replica],
                 activity: Activity) -> None:
        self.catalog = catalog
        self.replicas = replicas
        self.activity = activity
        # Replicas this plan stops to make room: their own models plan without them.
        self.taken: set[str] = set()
        # Models that would fit once replicas of others that look busy now go idle.
        self.behind_busy: set[str] = set()

    def later(self, model: Model, cluster: Cluster) -> str | None:
        """Why `model` is waiting for room, when it would fit once replicas of other models that
        are busy now (requests in flight or waiting) go idle; None when it would not even then."""
        calm = Activity(replicas={rid: use.model_copy(update={"in_flight": 0})
                                  for rid, use in self.activity.replicas.items()})
        found = eviction.choose(model, cluster, self.catalog, self.replicas, calm, self.taken)
        if found is None:
            return None
        self.behind_busy.add(model.name)
        busy = sorted({v.model for v in found.victims})
        return (f"{WAITING_FOR_ROOM} on {found.placement.node_id}: {', '.join(busy)} "
                f"{'is' if len(busy) == 1 else 'are'} busy; stopped to make room once idle")

    def make(self, model: Model, cluster: Cluster) -> tuple[list[Action], Place] | None:
        """The stops that let one replica of `model` fit, and its placement; None if none do."""
        found = eviction.choose(model, cluster, self.catalog, self.replicas, self.activity,
                                self.taken)
        if found is None:
            return None
        stops: list[Action] = []
        for victim, used in zip(found.victims, found.idle_since, strict=True):
            since = used.strftime("%H:%M:%S") if used else "it started"
            stops.append(Stop(victim.id, f"stopped to make room for {model.name} "
                                         f"(idle since {since})", room_for=model.name,
                              model=victim.model, node_id=victim.node_id))
            cluster.release(victim)
            self.taken.add(victim.id)
        where = found.placement
        cluster.take(model.name, where)
        return stops, _place(model, where)


def _drop(r: Replica, reason: str) -> Action:
    """Stop a placed replica (its agent stops the engine, then the row goes); a pending one has
    no engine and no agent to report it stopped, so its row goes at once."""
    return Stop(r.id, reason) if r.node_id is not None else Forget(r.id, reason)


def _make_way(model: Model, mine: list[Replica], leaving: list[Replica]) -> list[Action]:
    """Stop the replicas on draining nodes once the others ready cover `scaling.min`."""
    ready = sum(1 for r in mine if r.node_id is not None and r.state == ReplicaState.READY)
    if not leaving or ready < model.scaling.min:
        return []
    return [Stop(r.id, f"node {r.node_id} is draining ({ready} ready elsewhere)") for r in leaving]


def _gone(
    node: Node | None, node_id: str, now: datetime, node_timeout: timedelta,
    leading_since: datetime | None,
) -> str | None:
    """Why the replicas on `node_id` are beyond reach, or None while its agent reports."""
    if node is None:
        return f"node {node_id} is gone"
    why = lost(node, now, node_timeout, leading_since)
    return why.reason if why else None


def _keep(
    model: Model, mine: list[Replica], cluster: Cluster, want: Want | None = None,
    room: _Room | None = None,
) -> list[Action]:
    placed = [r for r in mine if r.node_id is not None]
    pending = [r for r in mine if r.node_id is None]
    target = model.scaling.min if want is None else want.replicas
    idle = dict(want.idle) if want is not None else {}
    cold = want is not None and want.cold
    actions: list[Action] = []
    # Scale down: drop pending replicas first, then idle ones (least recently used first), then
    # failed ones, then by id.
    lru = {rid: i for i, rid in enumerate(idle)}
    order = pending + sorted(placed, key=lambda r: (lru.get(r.id, len(lru)),
                                                    r.state != ReplicaState.FAILED, r.id))
    stopped = max(len(mine) - target, 0)
    for r in order[:stopped]:
        actions.append(_drop(r, idle.get(r.id) or f"{model.name} is scaled to {target}"))
    if len(placed) >= target:
        return actions
    # Pending replicas that survive the scale-down are tried again before new ones are made.
    kept = pending[stopped:]
    slots: list[Replica | None] = [*kept, *([None] * (target - len(placed) - len(kept)))]
    nowhere: Unschedulable | None = None
    for slot in slots:
        # Nothing is freed between this model's replicas: once one fits nowhere, the rest don't.
        where = nowhere or cluster.schedule(model)
        if isinstance(where, Unschedulable):
            made = room.make(model, cluster) if room is not None and want and want.queued else None
            if made is not None:
                stops, place = made
                actions += stops
                actions.append(replace(place, replica_id=slot.id if slot else None, cold=cold))
                continue
            nowhere = where
            why = (room.later(model, cluster) if room is not None and want and want.queued
                   else None) or where.summary
            if slot is None or slot.last_error != why:
                actions.append(Pend(model.name, why, slot.id if slot else None))
            continue
        cluster.take(model.name, where)
        actions.append(replace(_place(model, where), replica_id=slot.id if slot else None,
                               cold=cold))
    return actions


def _place(model: Model, where: Where) -> Place:
    """Put a new replica of `model` where the scheduler placed it."""
    p = where.profile
    return Place(model.name, where.node_id, p.name, p.cpu_cores, p.min_memory_gb,
                 gpu_class=where.gpu_class, gpus=p.gpu, devices=where.devices)


class ReplicaKeeper:
    """Applies the keeper's plan every `interval_s` (or when woken).

    With `read_activity` (the live servers' merged demand) it also plans on-demand models; it
    keeps between passes since when each model's load has stayed high (`busy_since`).
    `observe` is told of every action applied (metrics: cold starts, evictions)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[tuple[list[Model], list[Node], list[Replica]]]],
        apply: Callable[[Action], Awaitable[None]],
        clock: Clock,
        on_change: Callable[[], None] = lambda: None,
        node_timeout: timedelta = NODE_TIMEOUT,
        judge_machine: Callable[[], Awaitable[Mapping[str, str]]] | None = None,
        read_activity: Callable[[], Awaitable[Activity]] | None = None,
        settings: ControlSettings | None = None,
        observe: Callable[[Action], None] = lambda a: None,
        judge_targets: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self._read = read
        self._judge_targets = judge_targets  # the judge keeper's replicas per judge
        self._judge_machine = judge_machine
        self._node_timeout = node_timeout
        self._apply = apply
        self._clock = clock
        self._on_change = on_change
        self._read_activity = read_activity
        self._settings = settings or ControlSettings()
        self._observe = observe
        self.busy_since: dict[str, datetime] = {}
        # The last plan's `look_again_s`: see `next_look`.
        self.look_again_s: float | None = None
        self.wake = asyncio.Event()
        # When this server began leading (set on election): see `plan`'s `leading_since`.
        self.since: datetime | None = None
        self._last_read: datetime | None = None
        # A gap between two looks longer than this is a stall, not a slow pass. Nodes report
        # at least every third of the timeout, so a stall shorter than two thirds of it never
        # makes a live node look lost: half leaves room for slow passes on either side.
        self._stall = max(node_timeout / 2,
                          timedelta(seconds=2 * self._settings.keeper_interval_s))

    async def tick(self) -> list[Action]:
        """One pass: read, plan, apply; returns what it did."""
        models, nodes, replicas = await self._read()
        now = self._clock.now()
        if self._last_read is not None and now - self._last_read > self._stall:
            # This leader has not looked for much longer than its interval: its process or
            # machine stalled (a suspended laptop, a paused VM, a starved event loop) or the
            # store did not answer. The same stall keeps heartbeats from being written, so
            # silence is judged from now on, as after an election, not from before the gap:
            # otherwise every engine on this machine restarts after a long pause.
            self.since = now
        self._last_read = now
        machine = await self._judge_machine() if self._judge_machine else None
        activity = await self._read_activity() if self._read_activity else None
        actions = plan(models, nodes, replicas, now, self._node_timeout, self.since,
                       machine, activity, self._settings, self.busy_since, self._judge_targets())
        self.busy_since, self.look_again_s = actions.busy_since, actions.look_again_s
        for action in actions:
            logger.info("replica keeper: %s", _describe(action))
            await self._apply(action)
            self._observe(action)
        if actions:
            self._on_change()
        return actions

    def next_look(self, interval_s: float) -> float:
        """How long the loop waits, unless woken, before its next pass: `interval_s`, or less
        when the last plan asked to be made again sooner."""
        soon = self.look_again_s
        return interval_s if soon is None else min(soon, interval_s)

    async def run(self, interval_s: float) -> None:
        """Pass after pass, at `next_look(interval_s)` or when woken, until cancelled."""
        await every(lambda: self.next_look(interval_s), self.wake, self.tick, "replica keeper",
                    logger)


def _describe(action: Action) -> str:
    match action:
        case Place():
            cold = " (cold start)" if action.cold else ""
            return f"place {action.model} on {action.node_id} with profile {action.profile}{cold}"
        case Pend():
            return f"{action.model} pending: {action.reason}"
        case Stop(room_for=str(room)):
            # "stopped to make room for X (idle since …)", said with the victim's model and node.
            idle = action.reason.partition(f"make room for {room}")[2]
            return (f"stopped {action.replica_id} of {action.model} on {action.node_id} to make "
                    f"room for {room}{idle}")
        case Stop():
            return f"stop {action.replica_id}: {action.reason}"
        case Forget():
            return f"forget {action.replica_id}: {action.reason}"


def new_replica(action: Place | Pend) -> Replica:
    """The row a Place or Pend without a replica id creates."""
    if isinstance(action, Place):
        return Replica(id=new_id("rep"), model=action.model, **action.placement())
    return Replica(id=new_id("rep"), model=action.model, last_error=action.reason)

