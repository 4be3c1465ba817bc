"""People who sign in to the console, on the wire."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from llmgw.core.users import Grant, User


class UserOut(BaseModel):
    """A person who signed in to the console through the identity provider."""

    id: str
    email: str | None = None
    # Whether the provider verified `email`: only a verified one finds the user by email.
    email_verified: bool = False
    name: str | None = None
    issuer: str
    subject: str
    role: str | None = None  # admin, operator, viewer or team-admin:TEAM; None: no access
    role_source: Literal["provider", "admin"] = "provider"
    created_at: datetime
    signed_in_at: datetime
    sessions: int = 0  # live console sessions

    @classmethod
    def of(cls, user: User, sessions: int = 0) -> UserOut:
        return cls(id=user.id, email=user.email, email_verified=user.email_verified,
                   name=user.name, issuer=user.issuer,
                   subject=user.subject, role=str(user.grant) if user.grant else None,
                   role_source=user.role_source, created_at=user.created_at,
                   signed_in_at=user.signed_in_at, sessions=sessions)


class RoleRequest(BaseModel):
    """A role set by hand: `admin`, `operator`, `viewer`, `team-admin:TEAM`, or null (no
    access). The provider's groups no longer change it."""

    model_config = ConfigDict(extra="forbid")

    role: str | None

    @field_validator("role")
    @classmethod
    def _role(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                Grant.parse(v)
            except ValueError:
                raise ValueError(f"{v!r} is not a role: admin, operator, viewer or "
                                 "team-admin:TEAM") from None
        return v

    @property
    def grant(self) -> Grant | None:
        return Grant.parse(self.role) if self.role is not None else None


class SessionsEnded(BaseModel):
    """A user's console sessions an admin ended."""

    user: str
    ended: int
