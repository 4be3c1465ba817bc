"""Replicas in the database."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from llmgw.core.types import Replica, ReplicaState
from llmgw.store.db import bump_revision, utc
from llmgw.store.lease_repo import Fence
from llmgw.store.schema import replicas


def _to_replica(row: Any) -> Replica:
    return Replica(
        id=row.id,
        model=row.model,
        node_id=row.node_id,
        profile=row.profile,
        state=ReplicaState(row.state),
        endpoint=row.endpoint,
        pid=row.pid,
        restarts=row.restarts,
        last_error=row.last_error,
        cpu_cores=row.cpu_cores,
        memory_gb=row.memory_gb,
        gpu_class=row.gpu_class,
        gpus=row.gpus,
        devices=row.devices or [],
        updated_at=utc(row.updated_at),
    )


class ReplicaRepo:
    """Replica rows: the keeper creates and deletes them, node agents report their state."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self, model: str | None = None, node_id: str | None = None) -> list[Replica]:
        query = select(replicas).order_by(replicas.c.model, replicas.c.id)
        if model is not None:
            query = query.where(replicas.c.model == model)
        if node_id is not None:
            query = query.where(replicas.c.node_id == node_id)
        with self._engine.connect() as conn:
            return [_to_replica(r) for r in conn.execute(query).all()]

    def create(self, replica: Replica, now: datetime, fence: Fence | None = None) -> None:
        values = replica.model_dump(exclude={"updated_at"})
        values["state"] = replica.state.value
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            conn.execute(insert(replicas).values(**values, updated_at=now))
            bump_revision(conn)

    def update(
        self, replica_id: str, now: datetime, fence: Fence | None = None, **fields: Any
    ) -> bool:
        """Change some fields of one replica; False when it no longer exists."""
        if "state" in fields and isinstance(fields["state"], ReplicaState):
            fields["state"] = fields["state"].value
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            changed = conn.execute(
                update(replicas).where(replicas.c.id == replica_id).values(**fields, updated_at=now)
            ).rowcount
            if changed:
                bump_revision(conn)
        return bool(changed)

    def delete(self, replica_id: str, fence: Fence | None = None) -> None:
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            if conn.execute(delete(replicas).where(replicas.c.id == replica_id)).rowcount:
                bump_revision(conn)
