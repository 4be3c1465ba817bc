"""Nodes in the database."""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, update

from llmgw.core.errors import NodeIdTaken
from llmgw.core.types import Node
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import nodes, replicas


def _to_node(r: Any) -> Node:
    return Node(
        id=r.id,
        address=r.address,
        labels=r.labels,
        cores=r.cores,
        memory_gb=r.memory_gb,
        gpus=r.gpus,
        heartbeat_at=utc(r.heartbeat_at),
        cordoned=r.cordoned,
        draining=r.draining,
    )


class NodeRepo:
    """Nodes as their agents registered them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[Node]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(nodes).order_by(nodes.c.id)).all()
        return [_to_node(r) for r in rows]

    def upsert(
        self, node: Node, now: datetime, agent: str | None = None,
        taken_for: timedelta | None = None,
    ) -> None:
        """Register a node or refresh its hardware and heartbeat.

        The agent's labels are merged over the stored ones: labels set with `ctl node label`
        stay, and a label the agent declares is applied again each time it reports. A node
        another `agent` reported as within `taken_for` is refused with NodeIdTaken."""
        values = node.model_dump(exclude={"id", "heartbeat_at", "cordoned", "draining"})
        with self._engine.begin() as conn:
            query = select(nodes.c.labels, nodes.c.agent, nodes.c.heartbeat_at).where(
                nodes.c.id == node.id)
            if conn.dialect.name == "postgresql":
                query = query.with_for_update()  # two agents racing: one check at a time
            stored = conn.execute(query).first()
            if agent:
                values["agent"] = agent
            if stored is not None:
                last = utc(stored.heartbeat_at)
                if (agent and stored.agent and stored.agent != agent and taken_for is not None
                        and last is not None and now - last < taken_for):
                    raise NodeIdTaken(
                        f"node {node.id} is already reported by another agent (last report "
                        f"{(now - last).total_seconds():.0f}s ago): give this machine its own "
                        "--node-id, or stop the other agent", param="node.id")
                values["labels"] = {**(stored.labels or {}), **node.labels}
                conn.execute(
                    update(nodes).where(nodes.c.id == node.id).values(**values, heartbeat_at=now)
                )
            else:
                conn.execute(
                    insert(nodes).values(id=node.id, **values, heartbeat_at=now, cordoned=False)
                )
                bump_revision(conn)

    def get(self, node_id: str) -> Node | None:
        """One node, or None when no node has that id."""
        with self._engine.connect() as conn:
            return self._get(conn, node_id)

    def set_labels(
        self, node_id: str, set: dict[str, str], remove: builtins.list[str]
    ) -> Node | None:
        """Add or change the labels in `set` and drop those named in `remove`; None when the node
        does not exist. A label its agent declares comes back on the agent's next report."""
        with self._engine.begin() as conn:
            # FOR UPDATE (PostgreSQL): an agent's report merging labels at the same moment
            # waits for this write instead of overwriting it with what it read before.
            row = conn.execute(
                select(nodes.c.labels).where(nodes.c.id == node_id).with_for_update()
            ).first()
            if row is None:
                return None
            labels = {k: v for k, v in {**(row.labels or {}), **set}.items() if k not in remove}
            conn.execute(update(nodes).where(nodes.c.id == node_id).values(labels=labels))
            bump_revision(conn)
            return self._get(conn, node_id)

    def set_flags(
        self, node_id: str, cordoned: bool | None = None, draining: bool | None = None
    ) -> Node | None:
        """Cordon, uncordon or drain a node (None leaves a flag as it is); None when the node
        does not exist. Draining implies cordoned, and uncordoning ends a drain."""
        if cordoned is False and draining:
            raise ValueError("a draining node is always cordoned")
        values: dict[str, bool] = {}
        if cordoned is not None:
            values["cordoned"] = cordoned
            if not cordoned:
                values["draining"] = False
        if draining is not None:
            values["draining"] = draining
            if draining:
                values["cordoned"] = True
        with self._engine.begin() as conn:
            if values:
                changed = conn.execute(
                    update(nodes).where(nodes.c.id == node_id).values(**values)
                ).rowcount
                if not changed:
                    return None
                bump_revision(conn)
            return self._get(conn, node_id)

    def remove(self, node_id: str) -> bool:
        """Delete a node and its replica rows in one transaction; False when it did not exist.

        An agent still running on that machine registers the node again on its next report."""
        with self._engine.begin() as conn:
            if not conn.execute(delete(nodes).where(nodes.c.id == node_id)).rowcount:
                return False
            conn.execute(delete(replicas).where(replicas.c.node_id == node_id))
            bump_revision(conn)
        return True

    @staticmethod
    def _get(conn: Connection, node_id: str) -> Node | None:
        row = conn.execute(select(nodes).where(nodes.c.id == node_id)).first()
        return None if row is None else _to_node(row)
