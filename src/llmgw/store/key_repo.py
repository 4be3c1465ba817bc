"""API keys in the database (hashes only)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from llmgw.core.errors import NotFound
from llmgw.core.types import ApiKey, KeyScope, Limits
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import api_keys, settings


def _to_key(row: Any) -> ApiKey:
    return ApiKey(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        last4=row.last4,
        hash=row.hash,
        scope=KeyScope(row.scope),
        models=row.models,
        expires_at=utc(row.expires_at),
        revoked=row.revoked,
        by=row.by,
        created_at=utc(row.created_at),
        limits=Limits.model_validate(row.limits or {}),
        note=row.note or "",
        minted_by=row.minted_by,
        node_id=row.node_id,
    )


class KeyRepo:
    """Stored keys."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[ApiKey]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at)).all()
        return [_to_key(r) for r in rows]

    def get(self, key_id: str) -> ApiKey:
        with self._engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).one_or_none()
        if row is None:
            raise NotFound(f"key {key_id!r} does not exist", param="id")
        return _to_key(row)

    def create(self, key: ApiKey, revoke: str | None = None) -> None:
        """Store a new key (and, for a rotation, revoke the old one in the same transaction)."""
        values = key.model_dump()
        values["scope"] = key.scope.value
        values["limits"] = key.limits.model_dump(exclude_none=True)
        with self._engine.begin() as conn:
            conn.execute(insert(api_keys).values(**values))
            if revoke is not None:
                conn.execute(update(api_keys).where(api_keys.c.id == revoke).values(revoked=True))
            bump_revision(conn)

    def revoke(self, key_id: str) -> None:
        with self._engine.begin() as conn:
            if not conn.execute(update(api_keys).where(api_keys.c.id == key_id)
                                .values(revoked=True)).rowcount:
                raise NotFound(f"key {key_id!r} does not exist", param="id")
            bump_revision(conn)

    def default_limits(self) -> Limits:
        with self._engine.connect() as conn:
            value = conn.execute(
                select(settings.c.value).where(settings.c.name == "default_limits")
            ).scalar_one_or_none()
        return Limits.model_validate(value or {})

    def set_default_limits(self, limits: Limits) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(settings).where(settings.c.name == "default_limits"))
            conn.execute(insert(settings).values(name="default_limits",
                                                 value=limits.model_dump(exclude_none=True)))
            bump_revision(conn)
