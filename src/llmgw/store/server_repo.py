"""The servers of an install, each saying it is alive."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, insert, select, update

from llmgw.store.db import utc
from llmgw.store.schema import servers


@dataclass(frozen=True)
class ServerRow:
    id: str
    url: str
    started_at: datetime
    heartbeat_at: datetime


class ServerRepo:
    """One row per server process; rows of servers gone long ago are pruned."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def heartbeat(self, server_id: str, url: str, now: datetime) -> None:
        with self._engine.begin() as conn:
            if not conn.execute(
                update(servers).where(servers.c.id == server_id).values(heartbeat_at=now, url=url)
            ).rowcount:
                conn.execute(insert(servers).values(id=server_id, url=url, started_at=now,
                                                    heartbeat_at=now))

    def list(self) -> list[ServerRow]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(servers).order_by(servers.c.started_at)).all()
        return [ServerRow(r.id, r.url, utc(r.started_at) or r.started_at,
                          utc(r.heartbeat_at) or r.heartbeat_at) for r in rows]

    def remove(self, server_id: str) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(servers).where(servers.c.id == server_id))

    def prune(self, older_than: datetime) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(servers).where(servers.c.heartbeat_at < older_than))
