"""Swap by memory (pure): which idle replicas to stop so a waiting model fits.

When a model with requests waiting fits on no node, the keeper may stop replicas of other
models, all on ONE node where that frees enough. Only replicas that nothing needs are taken:

- never a judge (the guard's budget does not wait for a cold start),
- never one of a model's `min` replicas (a model keeps its `min` most recently used),
- never a replica with requests in flight, nor one of a model that has requests waiting,
- only ready (or failed) replicas: one still starting was just placed for its own demand.

Per node the candidates go least recently used first, and as few as make room. Among the nodes
where that works, the one whose most recently used victim is the oldest wins (then fewer
victims, then nodes not reserved for judges, then the node id).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from llmgw.control.demand import in_flight, last_use
from llmgw.control.scheduler import Cluster, Placement
from llmgw.core.demand import Activity
from llmgw.core.types import Model, Replica, ReplicaState

_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Eviction:
    """Stop `victims` (all on the placement's node), then place the model there."""

    placement: Placement
    victims: tuple[Replica, ...]
    # When each victim was last used (None: never), in the same order, for the log.
    idle_since: tuple[datetime | None, ...]


def candidates(
    for_model: str,
    models: Mapping[str, Model],
    replicas: list[Replica],
    activity: Activity,
    taken: Collection[str] = (),
) -> dict[str, list[tuple[Replica, datetime | None]]]:
    """Per node, the replicas that may be stopped to make room for `for_model`, least recently
    used first, with their last use. `taken`: replicas already stopping in this plan."""
    by_model: dict[str, list[tuple[Replica, datetime | None]]] = {}
    live: dict[str, int] = {}
    for r in replicas:
        if r.state == ReplicaState.STOPPING or r.id in taken or r.node_id is None:
            continue
        # Only placed replicas count towards `min`: a pending one serves nothing.
        live[r.model] = live.get(r.model, 0) + 1
        model = models.get(r.model)
        if (model is None or model.guard or model.is_remote or r.model == for_model
                or r.state not in (ReplicaState.READY, ReplicaState.FAILED)
                or in_flight(r.id, activity) or r.model in activity.queued):
            continue
        by_model.setdefault(r.model, []).append((r, last_use(r, activity)))
    per_node: dict[str, list[tuple[Replica, datetime | None]]] = {}
    for name, mine in by_model.items():
        spare = live[name] - models[name].scaling.min
        if spare <= 0:
            continue
        # The model keeps its `min` most recently used replicas.
        mine.sort(key=lambda c: (c[1] or _NEVER, c[0].id))
        for r, used in mine[:spare]:
            assert r.node_id is not None  # only placed replicas were gathered
            per_node.setdefault(r.node_id, []).append((r, used))
    for victims in per_node.values():
        victims.sort(key=lambda c: (c[1] or _NEVER, c[0].id))
    return per_node


def choose(
    model: Model,
    cluster: Cluster,
    models: Mapping[str, Model],
    replicas: list[Replica],
    activity: Activity,
    taken: Collection[str] = (),
) -> Eviction | None:
    """The one node and the fewest least recently used idle replicas on it whose stopping lets
    `model` fit, or None when no such node exists (the model fits nowhere even after eviction)."""
    best: tuple[tuple[datetime, int, bool, str], Eviction] | None = None
    open_nodes = set(cluster.open_nodes())
    for node_id, pool in sorted(candidates(model.name, models, replicas, activity, taken).items()):
        if node_id not in open_nodes:
            continue
        for n in range(1, len(pool) + 1):
            victims = pool[:n]
            where = cluster.fits_without(model, node_id, [r for r, _ in victims])
            if where is None:
                continue
            newest = max((used or _NEVER for _, used in victims), default=_NEVER)
            score = (newest, n, cluster.reserved(node_id), node_id)
            if best is None or score < best[0]:
                best = (score, Eviction(where, tuple(r for r, _ in victims),
                                        tuple(used for _, used in victims)))
            break
    return best[1] if best else None
