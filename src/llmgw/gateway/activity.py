"""This server's demand as the leader reads it: what waits in its queue, and how it uses each
replica of a local model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from llmgw.core.demand import Activity, ReplicaUse
from llmgw.core.guard import JudgeLoad
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.upstream.table import RoutingTable


class ActivityTracker:
    """Reads the routing table's upstream counters and the queue into an `Activity`."""

    def __init__(self, table: Callable[[], RoutingTable], queue: ColdQueue,
                 judges: Callable[[], Mapping[str, JudgeLoad]] = dict) -> None:
        self._table = table
        self._queue = queue
        self._judges = judges  # the judge admission's slots, queues and counters

    def snapshot(self, now: datetime) -> Activity:
        """The activity at `now`: queues by model, in-flight and last use by replica id, and
        the judges' admission."""
        replicas: dict[str, ReplicaUse] = {}
        for route in self._table().routes.values():
            if route.model.is_remote:  # a provider is not a replica anyone scales
                continue
            for up in route.upstreams:
                last = datetime.fromtimestamp(up.last_used, UTC) if up.last_used else None
                replicas[up.id] = ReplicaUse(in_flight=max(up.outstanding, 0), last_used=last)
        return Activity(queued=self._queue.queued(now), replicas=replicas,
                        judges=dict(self._judges()), at=now)
