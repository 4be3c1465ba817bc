"""Writing one named entry with its audit entry and a revision bump, in the caller's transaction."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import Connection, Executable, Table, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from llmgw.core.audit import AuditKind
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision

# insert: a new row (`taken` when the name is already); update: the row there is (`missing` when
# there is none); replace: the row there is, or a new one.
Write = Literal["insert", "update", "replace"]


def spec_of(entry: BaseModel, fields: set[str]) -> dict[str, Any]:
    """What the store keeps of `entry`: its `fields` as JSON, but for those left unset (None),
    so an entry that sets no new optional field (a cache setting) is stored as before it
    existed."""
    return {k: v for k, v in entry.model_dump(mode="json", include=fields).items() if v is not None}


def upsert(
    conn: Connection, table: Table, name: str, spec: Mapping[str, Any], *, write: Write,
    kind: AuditKind, action: str, by: str, now: datetime,
    taken: Exception | None = None, missing: Exception | None = None,
    fixed: Mapping[str, Any] | None = None,
    audited: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> None:
    """Write `spec` as `table`'s row `name` by `by` at `now`, audit it, bump the revision.
    `fixed` are columns a new row takes and no later write changes (a team's id); `audited`
    hides what the audit entry must not show of a spec, beyond what `record` drops."""
    where = table.c.name == name
    # Every table written here has name, spec and by; created_at (a new row's time) and
    # updated_at (every write's) where it has them.
    stamped = ("updated_at",) if write == "update" else ("created_at", "updated_at")
    stamps = {c: now for c in stamped if c in table.c}
    # The audit's `before`: the spec stored until now, None when there was none (or when
    # inserting, which fails if there was one).
    before = None if write == "insert" else conn.execute(
        select(table.c.spec).where(where)).scalar_one_or_none()
    if write == "update":
        if not conn.execute(update(table).where(where).values(spec=spec, by=by, **stamps)).rowcount:
            raise missing or LookupError(f"{table.name} {name!r} does not exist")
    elif write == "replace":
        conn.execute(_replace(conn, table, {"name": name, "spec": spec, "by": by, **stamps}))
    else:
        try:
            conn.execute(insert(table).values(name=name, spec=spec, by=by, **stamps,
                                              **(fixed or {})))
        except IntegrityError as exc:
            if taken is None:
                raise
            raise taken from exc
    if audited is not None:
        before, spec = (audited(before) if before is not None else None), audited(spec)
    record(conn, kind, action, name, before, spec, now)
    # Last, after the write and its entry, where each of these writes always bumped it; in the
    # same transaction, so a server that sees the new revision reads the change and a write that
    # fails bumps nothing. Writes that must take turns with others bump first (see KeyRepo.create,
    # TeamRepo.remove, UserRepo.set_grant) and so do not come through here.
    bump_revision(conn)


def _replace(conn: Connection, table: Table, row: dict[str, Any]) -> Executable:
    """Insert `row`, or overwrite the row its name has: one statement, so two writers replacing
    one name at once take turns on its row. (A delete then an insert did not on PostgreSQL: the
    second's delete missed the row the first inserted, and its insert collided with it.)"""
    dml = pg_insert(table) if conn.dialect.name == "postgresql" else sqlite_insert(table)
    return dml.values(row).on_conflict_do_update(
        index_elements=[table.c.name], set_={c: dml.excluded[c] for c in row if c != "name"})
