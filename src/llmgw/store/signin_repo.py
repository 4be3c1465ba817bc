"""Sign-in attempts per client address in fixed one-minute windows, counted in the store: one
statement adds each attempt, so every worker and server of the install counts into one row."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, case, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from llmgw.store.db import utc
from llmgw.store.schema import signin_attempts

WINDOW = timedelta(minutes=1)


class SigninRepo:
    """Counts sign-in attempts."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def attempt(self, address: str, now: datetime) -> tuple[int, datetime]:
        """Count one attempt from `address`; how many it made in the current window, this one
        included, and when that window started. An insert-or-update in one statement: two
        servers counting a first attempt at once cannot both insert."""
        table, address = signin_attempts, address[:64]
        with self._engine.begin() as conn:
            insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
            stmt = insert(table).values(address=address, window_start=now, count=1)
            stale = table.c.window_start <= now - WINDOW
            conn.execute(stmt.on_conflict_do_update(index_elements=["address"], set_={
                "count": case((stale, 1), else_=table.c.count + 1),
                "window_start": case((stale, now), else_=table.c.window_start),
            }))
            row = conn.execute(select(table.c.count, table.c.window_start)
                               .where(table.c.address == address)).one()
            count, began = row  # (Row.count is the tuple method, not the column)
            return int(count), utc(began) or now

    def prune(self, before: datetime) -> int:
        """Forget windows that started before `before`; how many."""
        with self._engine.begin() as conn:
            return conn.execute(delete(signin_attempts).where(
                signin_attempts.c.window_start < before)).rowcount
