"""Catalog models in the database."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, delete, select, update

from llmgw.core.audit import AuditKind
from llmgw.core.cache import CacheSpec
from llmgw.core.errors import Conflict, ModelNotFound
from llmgw.core.types import STORED, Model, Profile, Scaling
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.lease_repo import Fence
from llmgw.store.schema import models, replicas
from llmgw.store.upsert import spec_of, upsert

logger = logging.getLogger(__name__)

_SPEC_FIELDS = {"source", "profiles", "scaling", "guard", "cache"}


def _to_model(row: Any) -> Model:
    return Model.model_validate(
        {
            "name": row.name,
            **row.spec,
            "by": row.by,
            "created_at": utc(row.created_at),
            "updated_at": utc(row.updated_at),
        },
        context=STORED,
    )


class CatalogRepo:
    """Reads and writes catalog entries; every write bumps the revision."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[Model]:
        """Every entry; one that no longer validates is logged and left out, so it cannot stop
        the routing table, the keepers and the admin API from reading the rest."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(models).order_by(models.c.name)).all()
        out = []
        for r in rows:
            try:
                out.append(_to_model(r))
            except ValidationError:
                logger.exception("catalog entry %r is not valid; left out until fixed or removed",
                                 r.name)
        return out

    def get(self, name: str) -> Model:
        with self._engine.connect() as conn:
            row = conn.execute(select(models).where(models.c.name == name)).one_or_none()
        if row is None:
            raise ModelNotFound(f"model {name!r} is not in the catalog", param="name")
        return _to_model(row)

    def add(self, model: Model, by: str, now: datetime) -> Model:
        """Add a new entry; a name already taken is a Conflict."""
        spec = spec_of(model, _SPEC_FIELDS)
        with self._engine.begin() as conn:
            upsert(conn, models, model.name, spec, write="insert", kind=AuditKind.MODEL,
                   action="add", by=by, now=now,
                   taken=Conflict(f"model {model.name!r} already exists", param="name"))
        return self.get(model.name)

    def set_scaling(self, name: str, scaling: Scaling, by: str, now: datetime) -> Model:
        return self._set(name, "scaling", scaling.model_dump(mode="json"), "scale", by, now)

    def set_profiles(
        self, name: str, profiles: Sequence[Profile], by: str, now: datetime,
        fence: Fence | None = None,
    ) -> Model:
        return self._set(name, "profiles", [p.model_dump(mode="json") for p in profiles],
                         "set_profiles", by, now, fence)

    def set_cache(self, name: str, cache: CacheSpec | None, by: str, now: datetime) -> Model:
        """Set the model's own response cache setting (None: the install's)."""
        return self._set(name, "cache", None if cache is None else cache.model_dump(mode="json"),
                         "set_cache", by, now)

    def _set(self, name: str, field: str, value: Any, action: str, by: str, now: datetime,
             fence: Fence | None = None) -> Model:
        """Change one field of a model's spec, audited (None: the field is left out)."""
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            row = conn.execute(select(models.c.spec).where(models.c.name == name)).one_or_none()
            if row is None:
                raise ModelNotFound(f"model {name!r} is not in the catalog", param="name")
            spec = {k: v for k, v in row.spec.items() if k != field}
            if value is not None:
                spec[field] = value
            conn.execute(
                update(models).where(models.c.name == name).values(spec=spec, by=by, updated_at=now)
            )
            record(conn, AuditKind.MODEL, action, name, {field: row.spec.get(field)},
                   {field: value}, now)
            bump_revision(conn)
        return self.get(name)

    def remove(self, name: str) -> None:
        """Remove an entry; its replicas are marked stopping so node agents stop them."""
        with self._engine.begin() as conn:
            row = conn.execute(select(models.c.spec).where(models.c.name == name)).one_or_none()
            gone = conn.execute(delete(models).where(models.c.name == name)).rowcount
            if not gone or row is None:
                raise ModelNotFound(f"model {name!r} is not in the catalog", param="name")
            record(conn, AuditKind.MODEL, "remove", name, row.spec, None)
            conn.execute(update(replicas).where(replicas.c.model == name).values(state="stopping"))
            bump_revision(conn)
