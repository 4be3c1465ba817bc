"""Nodes in the database."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, insert, select, update

from llmgw.core.types import Node
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import nodes


class NodeRepo:
    """Nodes as their agents registered them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[Node]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(nodes).order_by(nodes.c.id)).all()
        return [
            Node(
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
            for r in rows
        ]

    def upsert(self, node: Node, now: datetime) -> None:
        """Register a node or refresh its hardware and heartbeat.

        The agent's labels are merged over the stored ones: labels set with `ctl node label`
        stay, and a label the agent declares is applied again each time it reports."""
        values = node.model_dump(exclude={"id", "heartbeat_at", "cordoned", "draining"})
        with self._engine.begin() as conn:
            stored = conn.execute(select(nodes.c.labels).where(nodes.c.id == node.id)).first()
            if stored is not None:
                values["labels"] = {**(stored.labels or {}), **node.labels}
                conn.execute(
                    update(nodes).where(nodes.c.id == node.id).values(**values, heartbeat_at=now)
                )
            else:
                conn.execute(
                    insert(nodes).values(id=node.id, **values, heartbeat_at=now, cordoned=False)
                )
                bump_revision(conn)
