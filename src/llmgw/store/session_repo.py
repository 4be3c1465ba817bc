"""The console's server-side sessions: started at sign-in, ended by sign-out (everywhere at
once), by an admin, or by the user's removal; the browser's token is never stored, only its
SHA-256 (a read of the table cannot be replayed as a cookie)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, delete, insert, or_, select, update

from llmgw.core.audit import AuditKind
from llmgw.core.ids import new_id
from llmgw.core.users import ConsoleSession
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import console_sessions


def token_hash(token: str) -> str:
    """What the store keeps of a session token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _to_session(row: Any) -> ConsoleSession:
    return ConsoleSession(
        id=row.id, user_id=row.user_id, address=row.address, created_at=utc(row.created_at),
        last_seen_at=utc(row.last_seen_at), expires_at=utc(row.expires_at),
        refresh_at=utc(row.refresh_at), ended_at=utc(row.ended_at), end_reason=row.end_reason)


class SessionRepo:
    """Reads and writes console sessions."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def start(self, user_id: str, address: str, now: datetime, max_age: timedelta,
              refresh_at: datetime | None = None) -> tuple[str, ConsoleSession]:
        """A new session for `user_id` signed in from `address`: its token (for the cookie,
        shown nowhere else) and the session."""
        token = secrets.token_urlsafe(32)
        session_id = new_id("ses")
        with self._engine.begin() as conn:
            conn.execute(insert(console_sessions).values(
                token_hash=token_hash(token), id=session_id, user_id=user_id,
                address=address[:64], created_at=now, last_seen_at=now, expires_at=now + max_age,
                refresh_at=refresh_at))
            record(conn, AuditKind.SESSION, "sign-in", session_id, None,
                   {"user": user_id, "address": address[:64]}, now)
            row = conn.execute(select(console_sessions).where(
                console_sessions.c.id == session_id)).one()
        return token, _to_session(row)

    def find(self, token: str) -> ConsoleSession | None:
        """The session a browser's token belongs to, whatever its state (None: no such token)."""
        with self._engine.connect() as conn:
            row = conn.execute(select(console_sessions).where(
                console_sessions.c.token_hash == token_hash(token))).one_or_none()
        return _to_session(row) if row is not None else None

    def seen(self, session_id: str, now: datetime, refresh_at: datetime | None = None) -> None:
        """The session was used at `now` (and, after a refresh at the provider, is next asked
        again at `refresh_at`)."""
        values: dict[str, Any] = {"last_seen_at": now}
        if refresh_at is not None:
            values["refresh_at"] = refresh_at
        with self._engine.begin() as conn:
            conn.execute(update(console_sessions).where(
                console_sessions.c.id == session_id, console_sessions.c.ended_at.is_(None))
                .values(**values))

    def end(self, session_id: str, reason: str, now: datetime) -> bool:
        """End one session everywhere; False when it had already ended (or never was)."""
        with self._engine.begin() as conn:
            done = conn.execute(update(console_sessions).where(
                console_sessions.c.id == session_id, console_sessions.c.ended_at.is_(None))
                .values(ended_at=now, end_reason=reason)).rowcount
            if done:
                # Every server's session cache is dropped at the revision it reads next.
                bump_revision(conn)
                record(conn, AuditKind.SESSION, "end", session_id, None, {"reason": reason}, now)
        return bool(done)

    def end_for_user(self, user_id: str, reason: str, now: datetime) -> int:
        """End every live session of `user_id`; how many there were."""
        with self._engine.begin() as conn:
            bump_revision(conn)
            ids = conn.execute(select(console_sessions.c.id).where(
                console_sessions.c.user_id == user_id, console_sessions.c.ended_at.is_(None),
                console_sessions.c.expires_at > now)).scalars().all()
            if ids:
                conn.execute(update(console_sessions).where(console_sessions.c.id.in_(ids))
                             .values(ended_at=now, end_reason=reason))
                record(conn, AuditKind.SESSION, "end", user_id, None,
                       {"reason": reason, "sessions": sorted(ids)}, now)
        return len(ids)

    def list(self, user_id: str | None = None, live_at: datetime | None = None) -> list[ConsoleSession]:
        """Sessions, newest first: of `user_id`, and with `live_at` only those not ended nor
        past their absolute end then."""
        query = select(console_sessions).order_by(console_sessions.c.created_at.desc())
        if user_id is not None:
            query = query.where(console_sessions.c.user_id == user_id)
        if live_at is not None:
            query = query.where(console_sessions.c.ended_at.is_(None),
                                console_sessions.c.expires_at > live_at)
        with self._engine.connect() as conn:
            return [_to_session(r) for r in conn.execute(query).all()]

    def prune(self, before: datetime) -> int:
        """Delete sessions that ended or expired before `before`; how many."""
        with self._engine.begin() as conn:
            return conn.execute(delete(console_sessions).where(or_(
                console_sessions.c.ended_at < before, console_sessions.c.expires_at < before))
            ).rowcount
