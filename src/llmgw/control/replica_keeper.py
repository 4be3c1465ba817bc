"""The replica keeper: keeps `scaling.min` replicas of every local model placed.

`plan` is pure: catalog, nodes and replicas in, actions out. `ReplicaKeeper` reads the store,
calls `plan`, writes the actions back and logs each once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from llmgw.control.placement import Free, free_on, misfit
from llmgw.core.clock import Clock
from llmgw.core.ids import new_id
from llmgw.core.loops import every
from llmgw.core.types import Model, Node, Profile, Replica, ReplicaState

logger = logging.getLogger(__name__)

# A node whose agent has not reported for this long gets no new replicas.
NODE_TIMEOUT = timedelta(seconds=30)


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


@dataclass(frozen=True)
class Forget:
    """A replica on a node that is lost: its row goes (nothing there can stop it), so traffic
    stops going to it and a new replica is placed elsewhere. Should the node come back, its
    agent stops the engine, which is no longer assigned to it."""

    replica_id: str
    reason: str


Action = Place | Pend | Stop | Forget


def plan(
    models: list[Model], nodes: list[Node], replicas: list[Replica], now: datetime
) -> list[Action]:
    """What to change so each local model has `scaling.min` replicas placed where they fit."""
    catalog = {m.name: m for m in models}
    actions: list[Action] = []
    live = [r for r in replicas if r.state != ReplicaState.STOPPING]
    for r in live:
        model = catalog.get(r.model)
        if model is None or model.is_remote:
            actions.append(Stop(r.id, f"model {r.model} is no longer in the catalog"))
    usable = [n for n in nodes if _alive(n, now)]
    free = {n.id: free_on(n, replicas) for n in usable}
    for model in sorted(catalog.values(), key=lambda m: m.name):
        if model.is_remote:
            continue
        mine = [r for r in live if r.model == model.name]
        actions += _keep(model, mine, usable, free)
    return actions


def _alive(node: Node, now: datetime) -> bool:
    return node.heartbeat_at is not None and now - node.heartbeat_at <= NODE_TIMEOUT


def _keep(model: Model, mine: list[Replica], nodes: list[Node], free: dict[str, Free]) -> list[Action]:
    placed = [r for r in mine if r.node_id is not None]
    pending = [r for r in mine if r.node_id is None]
    target = model.scaling.min
    actions: list[Action] = []
    # Scale down: drop pending replicas first, then failed ones, then by id.
    order = pending + sorted(placed, key=lambda r: (r.state != ReplicaState.FAILED, r.id))
    stopped = max(len(mine) - target, 0)
    for r in order[:stopped]:
        actions.append(Stop(r.id, f"{model.name} is scaled to {target}"))
    if len(placed) >= target:
        return actions
    # Pending replicas that survive the scale-down are tried again before new ones are made.
    kept = pending[stopped:]
    slots: list[Replica | None] = [*kept, *([None] * (target - len(placed) - len(kept)))]
    spread = {n.id: sum(1 for r in placed if r.node_id == n.id) for n in nodes}
    for slot in slots:
        where = _choose(model, nodes, free, spread)
        if isinstance(where, str):
            if slot is None or slot.last_error != where:
                actions.append(Pend(model.name, where, slot.id if slot else None))
            continue
        node, profile = where
        gpu_class = free[node].gpu_class_for(profile.gpu_class, profile.gpu) if profile.gpu else None
        free[node] = free[node].minus(profile.cpu_cores, profile.min_memory_gb, gpu_class, profile.gpu)
        spread[node] += 1
        actions.append(
            Place(model.name, node, profile.name, profile.cpu_cores, profile.min_memory_gb,
                  slot.id if slot else None, gpu_class, profile.gpu)
        )
    return actions


def _choose(
    model: Model, nodes: list[Node], free: dict[str, Free], spread: dict[str, int]
) -> tuple[str, Profile] | str:
    """The first profile that fits somewhere, on the node with fewest of this model's replicas."""
    if not nodes:
        return "no node is available (none has reported in the last 30s)"
    reasons: list[str] = []
    for profile in model.profiles:
        fits = [n for n in nodes if misfit(profile, n, free[n.id]) is None]
        if fits:
            best = min(fits, key=lambda n: (spread[n.id], -free[n.id].memory_gb, n.id))
            return best.id, profile
        why = "; ".join(m for n in nodes if (m := misfit(profile, n, free[n.id])))
        reasons.append(f"profile {profile.name}: {why}")
    return "does not fit: " + " | ".join(reasons)


class ReplicaKeeper:
    """Applies the keeper's plan every `interval_s` (or when woken)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[tuple[list[Model], list[Node], list[Replica]]]],
        apply: Callable[[Action], Awaitable[None]],
        clock: Clock,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._read = read
        self._apply = apply
        self._clock = clock
        self._on_change = on_change
        self.wake = asyncio.Event()

    async def tick(self) -> list[Action]:
        """One pass: read, plan, apply; returns what it did."""
        models, nodes, replicas = await self._read()
        actions = plan(models, nodes, replicas, self._clock.now())
        for action in actions:
            logger.info("replica keeper: %s", _describe(action))
            await self._apply(action)
        if actions:
            self._on_change()
        return actions

    async def run(self, interval_s: float) -> None:
        await every(interval_s, self.wake, self.tick, "replica keeper", logger)


def _describe(action: Action) -> str:
    match action:
        case Place():
            return f"place {action.model} on {action.node_id} with profile {action.profile}"
        case Pend():
            return f"{action.model} pending: {action.reason}"
        case Stop():
            return f"stop {action.replica_id}: {action.reason}"
        case Forget():
            return f"forget {action.replica_id}: {action.reason}"


def new_replica(action: Place | Pend) -> Replica:
    """The row a Place or Pend without a replica id creates."""
    if isinstance(action, Place):
        return Replica(
            id=new_id("rep"),
            model=action.model,
            node_id=action.node_id,
            profile=action.profile,
            state=ReplicaState.STARTING,
            cpu_cores=action.cpu_cores,
            memory_gb=action.memory_gb,
            gpu_class=action.gpu_class,
            gpus=action.gpus,
        )
    return Replica(id=new_id("rep"), model=action.model, last_error=action.reason)

