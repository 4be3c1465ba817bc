"""Nodes in the database."""

from __future__ import annotations

import builtins
import contextlib
import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, text, update

from llmgw.core.audit import AuditKind
from llmgw.core.errors import Forbidden, InvalidRequest, NodeIdTaken, Unauthenticated
from llmgw.core.types import Node
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import api_keys, nodes, replicas


def _to_node(r: Any) -> Node:
    return Node(
        id=r.id,
        address=r.address,
        labels=r.labels,
        cores=r.cores,
        memory_gb=r.memory_gb,
        gpus=r.gpus,
        devices=r.devices or [],
        heartbeat_at=utc(r.heartbeat_at),
        cordoned=r.cordoned,
        draining=r.draining,
    )


class NodeRepo:
    """Nodes as their agents registered them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # SQLite has one server, whose reads in a transaction take no lock: reports checking
        # and binding a node take turns here instead (PostgreSQL locks in the database).
        self._reports = threading.Lock() if engine.dialect.name == "sqlite" else None

    def list(self) -> list[Node]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(nodes).order_by(nodes.c.id)).all()
        return [_to_node(r) for r in rows]

    def upsert(self, node: Node, now: datetime) -> None:
        """Register a server's own embedded node or refresh its hardware and heartbeat.

        It is written with no agent, which marks it as a server's: no join token may report as
        it (and a token that once did loses it here). Labels merge as in `report`."""
        with self._engine.begin() as conn:
            self._write(conn, node, now, None, self._lock(conn, node.id))

    def report(
        self, node: Node, now: datetime, agent: str, token_id: str, taken_for: timedelta,
    ) -> None:
        """A node agent's report, made with join token `token_id`: register or refresh the node.

        The token is bound to one node (at creation, or here by its first report) and reports
        only as that one; a server's own node, or a node bound to another live token, is refused
        with Forbidden. A node another `agent` reported as within `taken_for` is refused with
        NodeIdTaken. The agent's labels are merged over the stored ones: labels set with
        `ctl node label` stay, and a label the agent declares is applied again each time."""
        if not agent:
            raise InvalidRequest("a report needs the agent's id", param="agent")
        with self._reports or contextlib.nullcontext(), self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Two first reports racing for one node id bind one token, one at a time (a row
                # lock cannot serialize them: the node row may not exist yet).
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                             {"k": "llmgw-node:" + node.id})
            key = conn.execute(select(api_keys.c.node_id, api_keys.c.revoked)
                               .where(api_keys.c.id == token_id)).first()
            if key is None or key.revoked:
                raise Unauthenticated("Incorrect API key provided")
            if key.node_id is not None and key.node_id != node.id:
                raise Forbidden(
                    f"this join token is bound to node {key.node_id} and cannot report as "
                    f"{node.id}: each machine needs its own token (`llmgw ctl node token create "
                    "--node ID`)", param="node.id")
            stored = self._lock(conn, node.id)
            if stored is not None and stored.agent is None:
                raise Forbidden(f"node {node.id} is a server's own node: no join token may report "
                                "as it", param="node.id")
            if stored is not None:
                last = utc(stored.heartbeat_at)
                if (stored.agent != agent and last is not None and now - last < taken_for):
                    raise NodeIdTaken(
                        f"node {node.id} is already reported by another agent (last report "
                        f"{(now - last).total_seconds():.0f}s ago): give this machine its own "
                        "--node-id, or stop the other agent", param="node.id")
            if key.node_id is None:
                self._bind(conn, token_id, node.id, now)
            self._write(conn, node, now, agent, stored)

    @staticmethod
    def _bind(conn: Connection, token_id: str, node_id: str, now: datetime) -> None:
        """Bind a token on its first report, unless another live token holds that node."""
        live = (api_keys.c.expires_at.is_(None)) | (api_keys.c.expires_at > now)
        holder = conn.execute(select(api_keys.c.id).where(
            api_keys.c.node_id == node_id, api_keys.c.id != token_id,
            api_keys.c.revoked.is_(False), live)).first()
        if holder is not None:
            raise Forbidden(
                f"node {node_id} is bound to another join token: revoke that one first, or "
                f"create a token for it with `llmgw ctl node token create --node {node_id}`",
                param="node.id")
        conn.execute(update(api_keys).where(api_keys.c.id == token_id).values(node_id=node_id))
        bump_revision(conn)

    @staticmethod
    def _lock(conn: Connection, node_id: str) -> Any:
        query = select(nodes.c.labels, nodes.c.agent, nodes.c.heartbeat_at, nodes.c.address).where(
            nodes.c.id == node_id)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()  # two agents racing: one check at a time
        return conn.execute(query).first()

    @staticmethod
    def _write(conn: Connection, node: Node, now: datetime, agent: str | None,
               stored: Any) -> None:
        values = node.model_dump(mode="json",
                                 exclude={"id", "heartbeat_at", "cordoned", "draining"})
        values["agent"] = agent
        if stored is not None:
            values["labels"] = {**(stored.labels or {}), **node.labels}
            conn.execute(
                update(nodes).where(nodes.c.id == node.id).values(**values, heartbeat_at=now)
            )
            if stored.address != node.address:
                # Routes check each replica's endpoint against its node's address: they must
                # see the new one (a quiet heartbeat bumps nothing).
                bump_revision(conn)
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
            record(conn, AuditKind.NODE, "label", node_id, {"labels": row.labels or {}},
                   {"labels": labels})
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
                was = conn.execute(select(nodes.c.cordoned, nodes.c.draining)
                                   .where(nodes.c.id == node_id)).first()
                changed = conn.execute(
                    update(nodes).where(nodes.c.id == node_id).values(**values)
                ).rowcount
                if not changed or was is None:
                    return None
                before = {"cordoned": bool(was.cordoned), "draining": bool(was.draining)}
                after = {**before, **values}
                action = "drain" if draining else "cordon" if cordoned else "uncordon"
                record(conn, AuditKind.NODE, action, node_id, before, after)
                bump_revision(conn)
            return self._get(conn, node_id)

    def remove(self, node_id: str) -> bool:
        """Delete a node and its replica rows in one transaction; False when it did not exist.

        An agent still running on that machine registers the node again on its next report."""
        with self._engine.begin() as conn:
            node = self._get(conn, node_id)
            if node is None or not conn.execute(delete(nodes).where(nodes.c.id == node_id)).rowcount:
                return False
            record(conn, AuditKind.NODE, "remove", node_id,
                   node.model_dump(mode="json", exclude={"heartbeat_at"}), None)
            conn.execute(delete(replicas).where(replicas.c.node_id == node_id))
            bump_revision(conn)
        return True

    @staticmethod
    def _get(conn: Connection, node_id: str) -> Node | None:
        row = conn.execute(select(nodes).where(nodes.c.id == node_id)).first()
        return None if row is None else _to_node(row)
