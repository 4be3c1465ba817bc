"""API keys in the database (hashes only)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, insert, select

from llmgw.core.types import ApiKey, KeyScope
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import api_keys


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
    )


class KeyRepo:
    """Stored keys."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[ApiKey]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at)).all()
        return [_to_key(r) for r in rows]

    def create(self, key: ApiKey) -> None:
        values = key.model_dump()
        values["scope"] = key.scope.value
        with self._engine.begin() as conn:
            conn.execute(insert(api_keys).values(**values))
            bump_revision(conn)
