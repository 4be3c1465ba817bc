"""The servers' side of node agents: heartbeats, replica reports and assignments in one call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

from llmgw.core.agent_wire import (
    Assigned,
    McpRunReport,
    ReplicaReport,
    SyncRequest,
    SyncResponse,
    on_address,
)
from llmgw.core.clock import Clock
from llmgw.core.engine_keys import EngineKeys
from llmgw.core.errors import Forbidden
from llmgw.core.types import ApiKey, Replica, ReplicaState
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

# A node's report of something that listens on it: a replica's, or a stdio MCP server's run.
R = TypeVar("R", ReplicaReport, McpRunReport)

_REPORTED = ("state", "endpoint", "pid", "restarts", "last_error")


class AgentService:
    """Answers `/agent/v1/sync`. Any server answers; none needs to be the leader, because an
    agent writes only its own node's row and the state of replicas already placed on it."""

    def __init__(
        self, store: Store, clock: Clock, engine_keys: EngineKeys,
        on_change: Callable[[], Awaitable[None]], node_timeout: timedelta = timedelta(seconds=30),
        servers_nodes: frozenset[str] = frozenset({"local"}),
    ) -> None:
        self._node_timeout = node_timeout
        # Ids servers use for their own embedded node, refused even before one registers.
        self._servers_nodes = servers_nodes
        self._store = store
        self._clock = clock
        self._engine_keys = engine_keys
        self._on_change = on_change

    async def sync(self, req: SyncRequest, token: ApiKey) -> SyncResponse:
        """Record the heartbeat and reports of the node `token` is bound to; answer with the
        node's assignments and its own engine key (never another node's: a leaked token opens
        no engine elsewhere)."""
        if req.node.id in self._servers_nodes:
            raise Forbidden(f"node {req.node.id} is a server's own node: no join token may report "
                            "as it", param="node.id")
        changed, assigned = await asyncio.to_thread(self._sync, req, token.id)
        if changed:
            await self._on_change()
        # After the report: it refuses a token bound to another node.
        return SyncResponse(assignments=assigned,
                            engine_key=self._engine_keys.for_node(req.node.id))

    def _sync(self, req: SyncRequest, token_id: str) -> tuple[bool, list[Assigned]]:
        store, now, node = self._store, self._clock.now(), req.node.id
        store.nodes.report(req.node, now, req.agent, token_id, self._node_timeout)
        mine = {r.id: r for r in store.replicas.list(node_id=node)}
        changed = False
        for report in req.replicas:
            current = mine.get(report.id)
            # A report for a replica no longer placed here (moved while this node was cut off)
            # changes nothing: the agent stops that engine once it sees the answer.
            if current is None or current.state == ReplicaState.STOPPING:
                continue
            report = on_own_address(report, ReplicaState.FAILED, f"replica {report.id}",
                                    req.node.id, req.node.address)
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


def on_own_address(report: R, failed: StrEnum, what: str, node_id: str, address: str) -> R:
    """The report, or, for an endpoint off the node's own address, `failed` saying so: servers
    send traffic (and the engine key) only where the node itself listens. `what` names what
    listens (for the log)."""
    if report.endpoint is None or on_address(report.endpoint, address):
        return report
    logger.warning("node %s reported %s listening off its address %s: refused",
                   node_id, what, address)
    return report.model_copy(update={
        "state": failed, "endpoint": None,
        "last_error": f"refused: the node reported an endpoint off its own address {address}",
    })


def _changes(current: Replica, report: ReplicaReport) -> dict[str, Any]:
    """The reported fields that differ from the row (so a quiet node does not bump revisions)."""
    return {f: getattr(report, f) for f in _REPORTED if getattr(report, f) != getattr(current, f)}
