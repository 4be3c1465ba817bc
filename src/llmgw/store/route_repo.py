"""Routes in the database; every write bumps the revision, so every server's table follows."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, delete, select

from llmgw.core.audit import AuditKind
from llmgw.core.errors import Conflict, ModelNotFound
from llmgw.core.routes import RouteSpec
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import routes
from llmgw.store.upsert import spec_of, upsert

logger = logging.getLogger(__name__)

_SPEC_FIELDS = {"targets", "strategy", "fallback", "retry", "cache"}


def _to_route(row: Any) -> RouteSpec:
    return RouteSpec.model_validate({"name": row.name, **row.spec, "by": row.by,
                                     "created_at": utc(row.created_at),
                                     "updated_at": utc(row.updated_at)})


class RouteRepo:
    """Reads and writes routes."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[RouteSpec]:
        """Every route; one that no longer validates is logged and left out."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(routes).order_by(routes.c.name)).all()
        out = []
        for r in rows:
            try:
                out.append(_to_route(r))
            except ValidationError:
                logger.exception("route %r is not valid; left out until fixed or removed", r.name)
        return out

    def get(self, name: str) -> RouteSpec:
        with self._engine.connect() as conn:
            row = conn.execute(select(routes).where(routes.c.name == name)).one_or_none()
        if row is None:
            raise ModelNotFound(f"route {name!r} does not exist", param="name")
        return _to_route(row)

    def put(self, spec: RouteSpec, by: str, now: datetime, *, replace: bool) -> RouteSpec:
        """Add a route (Conflict when the name is taken), or with `replace` change one that
        exists (ModelNotFound when it does not)."""
        values = spec_of(spec, _SPEC_FIELDS)
        with self._engine.begin() as conn:
            upsert(conn, routes, spec.name, values, write="update" if replace else "insert",
                   kind=AuditKind.ROUTE, action="set" if replace else "add", by=by, now=now,
                   taken=Conflict(f"route {spec.name!r} already exists", param="name"),
                   missing=ModelNotFound(f"route {spec.name!r} does not exist", param="name"))
        return self.get(spec.name)

    def remove(self, name: str) -> None:
        with self._engine.begin() as conn:
            old = conn.execute(select(routes.c.spec).where(routes.c.name == name)).one_or_none()
            if not conn.execute(delete(routes).where(routes.c.name == name)).rowcount:
                raise ModelNotFound(f"route {name!r} does not exist", param="name")
            record(conn, AuditKind.ROUTE, "remove", name, old.spec if old else None, None)
            bump_revision(conn)
