"""Leases for leader election, and the fencing check for leader-only writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from llmgw.core.errors import StaleEpoch
from llmgw.store.db import utc
from llmgw.store.schema import leases

LEADER = "leader"

# Run first inside a leader-only write's transaction; raises StaleEpoch to roll it back.
Fence = Callable[[Connection], None]


@dataclass(frozen=True)
class Lease:
    holder: str
    epoch: int
    renewed_at: datetime
    expires_at: datetime


class LeaseRepo:
    """Compare-and-set writes: at most one holder per lease and epoch, whatever the races."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, name: str = LEADER) -> Lease | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(leases).where(leases.c.name == name)).one_or_none()
        if row is None:
            return None
        return Lease(row.holder, row.epoch, utc(row.renewed_at) or row.renewed_at,
                     utc(row.expires_at) or row.expires_at)

    def acquire(self, me: str, now: datetime, ttl: timedelta, name: str = LEADER) -> Lease | None:
        """Take the lease if it is free or expired, with a new epoch; None if someone holds it."""
        expires = now + ttl
        with self._engine.begin() as conn:
            taken = conn.execute(
                update(leases)
                .where(leases.c.name == name, or_(leases.c.expires_at <= now, leases.c.holder == me))
                .values(holder=me, epoch=leases.c.epoch + 1, renewed_at=now, expires_at=expires)
            ).rowcount
            if not taken:
                exists = conn.execute(select(leases.c.name).where(leases.c.name == name)).first()
                if exists:
                    return None
                try:
                    with conn.begin_nested():
                        conn.execute(insert(leases).values(name=name, holder=me, epoch=1,
                                                           renewed_at=now, expires_at=expires))
                except IntegrityError:
                    return None  # another server inserted it first
        return self.get(name)

    def renew(self, me: str, epoch: int, now: datetime, ttl: timedelta, name: str = LEADER) -> bool:
        """Extend our lease; False when it is no longer ours at this epoch."""
        with self._engine.begin() as conn:
            return bool(conn.execute(
                update(leases)
                .where(leases.c.name == name, leases.c.holder == me, leases.c.epoch == epoch)
                .values(renewed_at=now, expires_at=now + ttl)
            ).rowcount)

    def release(self, me: str, epoch: int, now: datetime, name: str = LEADER) -> None:
        """Give the lease up at once (clean shutdown), so a successor need not wait for the TTL."""
        with self._engine.begin() as conn:
            conn.execute(update(leases)
                         .where(leases.c.name == name, leases.c.holder == me, leases.c.epoch == epoch)
                         .values(expires_at=now))


def check_epoch(conn: Connection, me: str, epoch: int, now: datetime, name: str = LEADER) -> None:
    """Inside a leader-only write's transaction: the lease is still ours at this epoch and
    unexpired, or StaleEpoch and the transaction rolls back. The row is locked (PostgreSQL) so a
    takeover cannot commit in between."""
    query = select(leases).where(leases.c.name == name)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query).one_or_none()
    if row is None or row.holder != me or row.epoch != epoch or (utc(row.expires_at) or now) < now:
        current = f"epoch {row.epoch} held by {row.holder}" if row is not None else "no lease"
        raise StaleEpoch(f"leader-only write refused: epoch {epoch} is stale ({current})")


def fence(me: str, epoch: int, now: Callable[[], datetime]) -> Fence:
    """The fence of leader `me` at `epoch`, for repository writes only a leader may make."""
    return lambda conn: check_epoch(conn, me, epoch, now())
