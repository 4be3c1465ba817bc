"""Operating nodes: their status, labels, cordon, drain and removal (`ctl node …`)."""

from __future__ import annotations

import asyncio
import builtins
import re
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from llmgw.core.clock import Clock
from llmgw.core.errors import Conflict, InvalidRequest, NotFound
from llmgw.core.types import Node, Replica
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store

# Label rules, close to Kubernetes' so selectors written for it read the same here: a key is
# 1-63 letters, digits and . _ / -, starting and ending with a letter or digit; a value is up
# to 63 of the same characters and may be empty (a label used as a flag, `gpu-node=`).
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9._/-]{0,63}$"
MAX_LABELS = 64
_KEY = re.compile(LABEL_KEY_PATTERN)
_VALUE = re.compile(LABEL_VALUE_PATTERN)


class NodeState(StrEnum):
    """How a node looks to an operator; `lost` wins over the others."""

    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"
    LOST = "lost"


@dataclass(frozen=True)
class NodeView:
    """A node with what `ctl node list` shows beside its hardware."""

    node: Node
    status: NodeState
    # Seconds since the agent last reported; None when it never has.
    heartbeat_age_s: float | None
    replica_count: int


@dataclass(frozen=True)
class NodeDetail:
    """What `ctl node show` shows: the node and the replicas placed on it."""

    view: NodeView
    replicas: list[Replica]


def check_labels(set: dict[str, str], remove: list[str]) -> None:
    """Refuse label changes that break the label rules, naming the offending label."""
    if len(set) + len(remove) > MAX_LABELS:
        raise InvalidRequest(f"at most {MAX_LABELS} label changes at a time", param="set")
    for key, value in set.items():
        if not _KEY.match(key):
            raise InvalidRequest(
                f"label key {key!r} must be 1-63 letters, digits and . _ / -, starting and "
                "ending with a letter or digit", param="set")
        if not _VALUE.match(value):
            raise InvalidRequest(
                f"label {key!r}: value {value!r} must be at most 63 letters, digits and . _ / - "
                "(empty is allowed)", param="set")
    both = sorted(k for k in remove if k in set)
    if both:
        raise InvalidRequest(f"labels both set and removed: {', '.join(both)}", param="remove")
    # Removal takes any stored key, even one an agent declared outside these rules.
    if any(not k or len(k) > 253 for k in remove):
        raise InvalidRequest("a label to remove needs a name of 1-253 characters", param="remove")


class NodeAdmin(AdminService):
    """Node changes made through the admin API; each wakes this server's caches and keeper."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        node_timeout_s: float,
        on_change: OnChange | None = None,
    ) -> None:
        # `on_change` is awaited after every write, so the keeper acts on it now rather than at
        # its next tick.
        super().__init__(store, clock, on_change)
        self._timeout = timedelta(seconds=node_timeout_s)

    def _view(self, node: Node, replica_count: int) -> NodeView:
        now = self._clock.now()
        age = None if node.heartbeat_at is None else (now - node.heartbeat_at).total_seconds()
        if age is None or age > self._timeout.total_seconds():
            status = NodeState.LOST
        elif node.draining:
            status = NodeState.DRAINING
        elif node.cordoned:
            status = NodeState.CORDONED
        else:
            status = NodeState.READY
        return NodeView(node, status, age, replica_count)

    async def _node(self, node_id: str) -> Node:
        node = await asyncio.to_thread(self._store.nodes.get, node_id)
        if node is None:
            raise _unknown(node_id)
        return node

    async def _replicas(self, node_id: str) -> list[Replica]:
        return await asyncio.to_thread(self._store.replicas.list, None, node_id)

    async def list(self) -> list[NodeView]:
        """Every node with its status, heartbeat age and replica count."""
        nodes = await asyncio.to_thread(self._store.nodes.list)
        replicas = await asyncio.to_thread(self._store.replicas.list)
        counts = Counter(r.node_id for r in replicas)
        return [self._view(n, counts[n.id]) for n in nodes]

    async def show(self, node_id: str) -> NodeDetail:
        """One node and its replicas; NotFound when there is no such node."""
        node = await self._node(node_id)
        replicas = await self._replicas(node_id)
        return NodeDetail(self._view(node, len(replicas)), replicas)

    async def label(
        self, node_id: str, set: dict[str, str], remove: builtins.list[str]
    ) -> NodeView:
        """Set and remove labels. A label its agent declares comes back on the next report."""
        check_labels(set, remove)
        node = await asyncio.to_thread(self._store.nodes.set_labels, node_id, set, remove)
        return await self._after_write(node_id, node)

    async def cordon(self, node_id: str) -> NodeView:
        """No new replicas on this node; those running there stay."""
        node = await asyncio.to_thread(self._store.nodes.set_flags, node_id, True, None)
        return await self._after_write(node_id, node)

    async def uncordon(self, node_id: str) -> NodeView:
        """Take new replicas again; this also ends a drain."""
        node = await asyncio.to_thread(self._store.nodes.set_flags, node_id, False, False)
        return await self._after_write(node_id, node)

    async def drain(self, node_id: str) -> NodeView:
        """Cordon the node and let the keeper stop its replicas and place them elsewhere."""
        node = await asyncio.to_thread(self._store.nodes.set_flags, node_id, True, True)
        return await self._after_write(node_id, node)

    async def remove(self, node_id: str, force: bool = False) -> None:
        """Forget a node and its replica rows; the keeper places those replicas elsewhere.

        Refused (Conflict, code `node_in_use`) while the node reports and still has replicas,
        unless `force`: drain it first and remove it once it is empty. A lost node goes at
        once. An agent still running on that machine registers the node again on its next
        report: stop the agent first to retire the machine for good."""
        view = (await self.show(node_id)).view
        if view.replica_count and view.status != NodeState.LOST and not force:
            how = ("wait until the drain has moved them" if view.status == NodeState.DRAINING
                   else f"drain it first (`llmgw ctl node drain {node_id} --wait`)")
            raise Conflict(
                f"node {node_id!r} is {view.status.value} and still has {view.replica_count} "
                f"replica(s): {how}, or remove it with force", param="id", code="node_in_use")
        if not await asyncio.to_thread(self._store.nodes.remove, node_id):
            raise _unknown(node_id)
        await self._changed()

    async def _after_write(self, node_id: str, node: Node | None) -> NodeView:
        if node is None:
            raise _unknown(node_id)
        await self._changed()
        return self._view(node, len(await self._replicas(node_id)))


def _unknown(node_id: str) -> NotFound:
    return NotFound(f"node {node_id!r} does not exist", param="id", code="node_not_found")
