"""The servers of an install, each saying it is alive."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import ValidationError
from sqlalchemy import Engine, delete, insert, select, update

from llmgw.core.demand import Activity, merge
from llmgw.store.db import bump_revision, utc
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

    def set_activity(self, server_id: str, activity: Activity, bump: bool = False) -> None:
        """Write this server's demand; `bump` wakes every server's refresher, the leader's among
        them (for a queue that just formed: a cold start must not wait for the next pass)."""
        text = activity.model_dump_json()
        with self._engine.begin() as conn:
            conn.execute(update(servers).where(servers.c.id == server_id).values(activity=text))
            if bump:
                bump_revision(conn)

    def activity(self, now: datetime, timeout: timedelta) -> Activity:
        """The demand of every live server merged: a server whose heartbeat is older than
        `timeout` is gone, and so are its queues and requests in flight."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(servers.c.heartbeat_at, servers.c.activity)
                                .where(servers.c.activity.is_not(None))).all()
        live = []
        for r in rows:
            if now - (utc(r.heartbeat_at) or r.heartbeat_at) > timeout:
                continue
            try:
                live.append(Activity.model_validate_json(r.activity))
            except ValidationError:
                continue  # written by a newer version: its demand is unknown, not an error
        return merge(live)

    def remove(self, server_id: str) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(servers).where(servers.c.id == server_id))

    def prune(self, older_than: datetime) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(servers).where(servers.c.heartbeat_at < older_than))
