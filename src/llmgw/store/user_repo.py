"""People signed in through the identity provider, and their roles."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from llmgw.core.audit import AuditKind
from llmgw.core.errors import NotFound
from llmgw.core.ids import new_id
from llmgw.core.users import Grant, Role, User
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import console_sessions, users


def _to_user(row: Any) -> User:
    grant = Grant(role=Role(row.role), team=row.team) if row.role else None
    return User(id=row.id, issuer=row.issuer, subject=row.subject, email=row.email,
                email_verified=row.email_verified, name=row.name, grant=grant, role_source=row.role_source,
                created_at=utc(row.created_at), signed_in_at=utc(row.signed_in_at))


def _grant_columns(grant: Grant | None) -> dict[str, Any]:
    return {"role": grant.role.value if grant else None, "team": grant.team if grant else None}


def _role_text(role: str | None, team: str | None) -> str | None:
    return f"{role}:{team}" if role and team else role


def _shown(user: User) -> dict[str, Any]:
    return {"email": user.email, "role": str(user.grant) if user.grant else None,
            "role_source": user.role_source}


class UserRepo:
    """Reads and writes users."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def signed_in(self, issuer: str, subject: str, email: str | None, name: str | None,
                  grant: Grant | None, now: datetime) -> User:
        """The user the provider just signed in, added or brought up to date: email and name as
        the provider says now, and `grant` (from the provider's groups) unless an admin set the
        role by hand. `email` is one the provider verified, or None: it is what an admin finds
        the user by."""
        verified = {"email": email, "email_verified": email is not None}
        with self._engine.begin() as conn:
            row = conn.execute(select(users).where(users.c.issuer == issuer,
                                                   users.c.subject == subject)).one_or_none()
            if row is None:
                user_id = new_id("usr")
                conn.execute(insert(users).values(
                    id=user_id, issuer=issuer, subject=subject, name=name, **verified,
                    role_source="provider", created_at=now, signed_in_at=now,
                    **_grant_columns(grant)))
            else:
                user_id = row.id
                values: dict[str, Any] = {**verified, "name": name, "signed_in_at": now}
                if row.role_source == "provider":
                    values.update(_grant_columns(grant))
                    if (row.role, row.team) != (values["role"], values["team"]):
                        # The provider changed the role: the user's other sessions take it too.
                        bump_revision(conn)
                        record(conn, AuditKind.USER, "role", user_id,
                               {"role": _role_text(row.role, row.team)},
                               {"role": str(grant) if grant else None, "role_source": "provider"},
                               now)
                conn.execute(update(users).where(users.c.id == user_id).values(**values))
            return _to_user(conn.execute(select(users).where(users.c.id == user_id)).one())

    def get(self, user_id: str) -> User:
        with self._engine.connect() as conn:
            row = conn.execute(select(users).where(users.c.id == user_id)).one_or_none()
        if row is None:
            raise NotFound(f"user {user_id!r} does not exist", param="user")
        return _to_user(row)

    def list(self) -> list[User]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(users).order_by(users.c.email, users.c.id)).all()
        return [_to_user(r) for r in rows]

    def set_grant(self, user_id: str, grant: Grant | None, now: datetime) -> User:
        """Set the user's role by hand (None: no access); the provider's groups no longer
        change it."""
        with self._engine.begin() as conn:
            row = conn.execute(select(users).where(users.c.id == user_id)).one_or_none()
            if row is None:
                raise NotFound(f"user {user_id!r} does not exist", param="user")
            before = _to_user(row)
            bump_revision(conn)  # the user's cached sessions take the new role on every server
            conn.execute(update(users).where(users.c.id == user_id).values(
                role_source="admin", **_grant_columns(grant)))
            after = _to_user(conn.execute(select(users).where(users.c.id == user_id)).one())
            record(conn, AuditKind.USER, "role", user_id, _shown(before), _shown(after), now)
        return after

    def remove(self, user_id: str, now: datetime) -> None:
        """Forget the user; their sessions go with them (deleted here too: SQLite does not
        enforce foreign keys unless asked, so the cascade is not relied on)."""
        with self._engine.begin() as conn:
            row = conn.execute(select(users).where(users.c.id == user_id)).one_or_none()
            if row is None:
                raise NotFound(f"user {user_id!r} does not exist", param="user")
            bump_revision(conn)
            conn.execute(delete(console_sessions).where(console_sessions.c.user_id == user_id))
            conn.execute(delete(users).where(users.c.id == user_id))
            record(conn, AuditKind.USER, "remove", user_id, _shown(_to_user(row)), None, now)
