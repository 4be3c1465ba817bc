"""Named demand data for tests: on-demand models and what the servers report of their use.

Companion to tests/factories.py (same style: plain functions with keyword overrides).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from llmgw.core.demand import Activity, Queued, ReplicaUse
from llmgw.core.settings import ControlSettings
from llmgw.core.types import Model, Node, Replica, Scaling
from tests.factories import NOW, cpu_profile, local_model, node, replica_ready

# Scale up past 4 requests per ready replica held for 5 s (the defaults, named for the reader).
SETTINGS = ControlSettings(scale_up_load=4.0, scale_up_after_s=5.0)


def ago(seconds: float, now: datetime = NOW) -> datetime:
    return now - timedelta(seconds=seconds)


def on_demand_model(
    name: str = "gemma3-270m", *, max: int = 1, idle_s: float | None = 300, min: int = 0,
    memory_gb: float = 2.0, **over: Any,
) -> Model:
    """A model scaled to zero when idle: min 0, started by its first request."""
    over.setdefault("profiles", [cpu_profile(cores=1, memory_gb=memory_gb)])
    model = local_model(name, **over)
    return model.model_copy(update={"scaling": Scaling(min=min, max=max, idle_s=idle_s)})


def queue_of(model: str, waiting: int = 1, since: datetime = NOW) -> Activity:
    """`waiting` requests queued for `model` across the servers, the oldest since `since`."""
    return Activity(queued={model: Queued(waiting=waiting, since=since)}, at=NOW)


def use(**replicas: tuple[int, datetime | None]) -> dict[str, ReplicaUse]:
    """Replica id → (requests in flight, last used)."""
    return {rid: ReplicaUse(in_flight=n, last_used=last) for rid, (n, last) in replicas.items()}


def activity(
    queued: dict[str, int] | None = None, replicas: dict[str, ReplicaUse] | None = None,
) -> Activity:
    """The merged demand: waiting requests per model, use per replica id."""
    return Activity(
        queued={m: Queued(waiting=n, since=NOW) for m, n in (queued or {}).items()},
        replicas=replicas or {}, at=NOW,
    )


NO_DEMAND = Activity(at=NOW)


def four_gb_node(id: str = "node-1", **over: Any) -> Node:
    """A small box: 8 cores, 4 GB, room for two 2 GB models at a time."""
    return node(id, cores=8, memory_gb=4.0, **over)


def running(id: str, model: str, *, node_id: str = "node-1", memory_gb: float = 2.0,
            **over: Any) -> Replica:
    """A ready replica of `model` holding `memory_gb` on `node_id`."""
    return replica_ready(id, model, node_id=node_id, memory_gb=memory_gb, **over)
