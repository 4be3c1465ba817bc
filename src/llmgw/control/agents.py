"""The servers' side of node agents: heartbeats, replica reports and assignments in one call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from llmgw.core.agent_wire import Assigned, ReplicaReport, SyncRequest, SyncResponse
from llmgw.core.clock import Clock
from llmgw.core.types import Replica, ReplicaState
from llmgw.store.store import Store

_REPORTED = ("state", "endpoint", "pid", "restarts", "last_error")


class AgentService:
    """Answers `/agent/v1/sync`. Any server answers; none needs to be the leader, because an
    agent writes only its own node's row and the state of replicas already placed on it."""

    def __init__(
        self, store: Store, clock: Clock, engine_key: str,
        on_change: Callable[[], Awaitable[None]], node_timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        self._node_timeout = node_timeout
        self._store = store
        self._clock = clock
        self._engine_key = engine_key
        self._on_change = on_change

    async def sync(self, req: SyncRequest) -> SyncResponse:
        """Record the heartbeat and reports; answer with the node's assignments."""
        changed, assigned = await asyncio.to_thread(self._sync, req)
        if changed:
            await self._on_change()
        return SyncResponse(assignments=assigned, engine_key=self._engine_key)

    def _sync(self, req: SyncRequest) -> tuple[bool, list[Assigned]]:
        store, now, node = self._store, self._clock.now(), req.node.id
        store.nodes.upsert(req.node, now, req.agent or None, self._node_timeout)
        mine = {r.id: r for r in store.replicas.list(node_id=node)}
        changed = False
        for report in req.replicas:
            current = mine.get(report.id)
            # A report for a replica no longer placed here (moved while this node was cut off)
            # changes nothing: the agent stops that engine once it sees the answer.
            if current is None or current.state == ReplicaState.STOPPING:
                continue
            fields = _changes(current, report)
            if fields:
                changed |= store.replicas.update(report.id, now, **fields)
        for rid in req.stopped:
            current = mine.pop(rid, None)
            if current is not None and current.state == ReplicaState.STOPPING:
                store.replicas.delete(rid)
                changed = True
        if changed:
            mine = {r.id: r for r in store.replicas.list(node_id=node)}
        models = {m.name: m for m in store.catalog.list()}
        return changed, [Assigned(replica=r, model=models.get(r.model)) for r in mine.values()]


def _changes(current: Replica, report: ReplicaReport) -> dict[str, Any]:
    """The reported fields that differ from the row (so a quiet node does not bump revisions)."""
    return {f: getattr(report, f) for f in _REPORTED if getattr(report, f) != getattr(current, f)}
