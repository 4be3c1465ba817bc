"""Usage counters and the shared per-minute rate windows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Connection, Engine, Table, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DataError, IntegrityError

from llmgw.core.errors import StoreRefused
from llmgw.core.types import UsageRow
from llmgw.store.schema import rate_windows, usage


class UsageRepo:
    """Additive writes, so any number of servers can flush their deltas."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add_usage(self, rows: Iterable[UsageRow]) -> None:
        """Add the rows' counts in one transaction; StoreRefused when the database refuses the
        data (a count out of range), so the caller can write the other rows without it."""
        add_rows(self._engine, usage, rows, ("key_id", "model", "day"), "usage")

    def usage(
        self, key_id: str | None = None, model: str | None = None, since: str | None = None
    ) -> list[UsageRow]:
        query = select(usage).order_by(usage.c.day, usage.c.key_id, usage.c.model)
        if key_id:
            query = query.where(usage.c.key_id == key_id)
        if model:
            query = query.where(usage.c.model == model)
        if since:
            query = query.where(usage.c.day >= since)
        with self._engine.connect() as conn:
            return [UsageRow(**r._mapping) for r in conn.execute(query).all()]

    def tokens_since(self, key_ids: list[str], day: str) -> dict[str, int]:
        """Tokens used per key from `day` (inclusive) on: for daily and monthly budgets."""
        if not key_ids:
            return {}
        total = func.sum(usage.c.prompt_tokens + usage.c.completion_tokens)
        query = (select(usage.c.key_id, total).where(usage.c.key_id.in_(key_ids), usage.c.day >= day)
                 .group_by(usage.c.key_id))
        with self._engine.connect() as conn:
            return {k: int(v or 0) for k, v in conn.execute(query).all()}

    def add_rates(self, deltas: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Add (requests, tokens) per (key id, minute)."""
        with self._engine.begin() as conn:
            for (key_id, minute), (reqs, toks) in deltas.items():
                add_counts(conn, rate_windows, {"key_id": key_id, "minute": minute},
                     {"requests": reqs, "tokens": toks})

    def rates(self, minutes: list[int]) -> dict[tuple[str, int], tuple[int, int]]:
        """Every key's (requests, tokens) in these minutes, as all servers wrote them."""
        query = select(rate_windows).where(rate_windows.c.minute.in_(minutes))
        with self._engine.connect() as conn:
            return {(r.key_id, r.minute): (r.requests, r.tokens) for r in conn.execute(query).all()}

    def prune_rates(self, before_minute: int) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(rate_windows).where(rate_windows.c.minute < before_minute))


def add_rows(engine: Engine, table: Table, rows: Iterable[BaseModel], names: tuple[str, ...],
             what: str) -> None:
    """Add each row's counts (every field but `names`, which name its row in `table`) in one
    transaction; StoreRefused (saying `what` was not written) when the database refuses them."""
    try:
        with engine.begin() as conn:
            for r in rows:
                data = r.model_dump()
                add_counts(conn, table, {n: data[n] for n in names},
                           {k: v for k, v in data.items() if k not in names})
    except (DataError, IntegrityError, OverflowError) as exc:
        raise StoreRefused(f"{what} not written: {type(exc).__name__}") from exc


def add_counts(conn: Connection, table: Table, key: dict[str, Any],
               deltas: Mapping[str, float]) -> None:
    """Add `deltas` to the row at `key`, creating it: one statement, so two servers adding to
    a row neither has yet cannot both insert it (an update-then-insert can)."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = dialect_insert(table).values(**key, **deltas)
    conn.execute(stmt.on_conflict_do_update(
        index_elements=list(key), set_={c: table.c[c] + stmt.excluded[c] for c in deltas}))
