"""The audit log in the database: one row per change made through the admin API, written in
the transaction of the change itself, so a change that fails (or is rolled back) leaves none.

Any repository write adds its entry with `record(conn, kind, action, target, before, after)`
inside its `engine.begin()` block; `before` and `after` go through `core.redact.scrubbed` first,
which drops every field that could hold a secret, whatever the caller passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select

from llmgw.core.audit import AuditEntry, AuditKind, actor
from llmgw.core.audit import address as client_address
from llmgw.core.redact import scrubbed
from llmgw.store.db import utc
from llmgw.store.schema import audit_log


def record(conn: Connection, kind: AuditKind, action: str, target: str,
           before: Mapping[str, Any] | None = None, after: Mapping[str, Any] | None = None,
           at: datetime | None = None) -> None:
    """Add an entry for a change made in `conn`'s transaction, by whoever is acting
    (`core.audit.acting`); nothing when nobody is (the control plane's own writes)."""
    by = actor()
    if by is None:
        return
    conn.execute(insert(audit_log).values(
        at=at or datetime.now(UTC), by=by, kind=kind.value, action=action, target=target,
        address=client_address(),
        before=scrubbed(dict(before)) if before is not None else None,
        after=scrubbed(dict(after)) if after is not None else None,
    ))


class AuditRepo:
    """Reads and prunes the audit log."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def entries(self, *, since: datetime | None = None, who: str | None = None,
                kind: AuditKind | None = None, target: str | None = None,
                limit: int = 100) -> list[AuditEntry]:
        """Newest first, filtered (`who`: a substring of `by`, e.g. a key's name)."""
        query = select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if since is not None:
            query = query.where(audit_log.c.at >= since)
        if who:
            query = query.where(audit_log.c.by.contains(who, autoescape=True))
        if kind is not None:
            query = query.where(audit_log.c.kind == kind.value)
        if target:
            query = query.where(audit_log.c.target == target)
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
        return [AuditEntry(id=r.id, at=utc(r.at) or r.at, by=r.by, kind=AuditKind(r.kind),
                           action=r.action, target=r.target, before=r.before, after=r.after,
                           address=r.address)
                for r in rows]

    def prune(self, before: datetime) -> int:
        """Drop entries older than `before`; how many."""
        with self._engine.begin() as conn:
            return conn.execute(delete(audit_log).where(audit_log.c.at < before)).rowcount or 0
