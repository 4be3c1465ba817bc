"""People who sign in to the console with the company's identity provider: their roles, and the
console sessions they (or a key) hold.

A user is who the provider says (issuer + subject), with one role. The role comes from the
provider's groups through the install's mapping at every sign-in, until an admin sets one by
hand (`role_source = "admin"`): from then on the groups no longer change it, and a mapping that
loses the user's group does not silently demote a role an admin chose. `None` is "signed in,
no access": a user whose groups map to nothing sees only a page that says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from llmgw.core.types import ApiKey, KeyScope


class Role(StrEnum):
    """What a signed-in person may do; each role can do what the ones below it can."""

    ADMIN = "admin"  # everything
    OPERATOR = "operator"  # models, nodes, jobs, guard; not other people's keys
    TEAM_ADMIN = "team-admin"  # one team's keys, their limits within the team's, its usage
    VIEWER = "viewer"  # read-only


# Which of two roles a user with both groups gets: the one that may do more.
RANK = {Role.ADMIN: 4, Role.OPERATOR: 3, Role.TEAM_ADMIN: 2, Role.VIEWER: 1}


class Grant(BaseModel):
    """A role, and for a team admin the team it is admin of."""

    model_config = ConfigDict(frozen=True)

    role: Role
    team: str | None = None

    @model_validator(mode="after")
    def _team_for_team_admins_only(self) -> Grant:
        if (self.role is Role.TEAM_ADMIN) != (self.team is not None):
            raise ValueError("a team admin needs a team, and only a team admin has one")
        return self

    @classmethod
    def parse(cls, text: str) -> Grant:
        """`admin`, `operator`, `viewer` or `team-admin:TEAM` (the config's and ctl's form)."""
        role, _, team = text.strip().partition(":")
        return cls(role=Role(role), team=team or None)

    def __str__(self) -> str:
        return f"{self.role.value}:{self.team}" if self.team else self.role.value


def grant_for(groups: Iterable[str], mapping: Mapping[str, Grant],
              default: Grant | None = None) -> Grant | None:
    """The grant of a user in `groups`: the highest a mapped group gives, else `default`. Two
    team-admin groups of different teams: the team first in name order (a person admins one
    team in the console; an admin can set another by hand)."""
    found = [mapping[g] for g in groups if g in mapping]
    if not found:
        return default
    return min(found, key=lambda g: (-RANK[g.role], g.team or ""))


class User(BaseModel):
    """A person the identity provider signed in."""

    model_config = ConfigDict(frozen=True)

    id: str
    issuer: str
    subject: str
    email: str | None = None
    # Whether the provider said it verified `email`. Only a verified email is stored since
    # 0018; a row from before it keeps its email, unverified, until the person signs in again.
    email_verified: bool = False
    name: str | None = None
    grant: Grant | None = None
    role_source: Literal["provider", "admin"] = "provider"
    created_at: datetime
    signed_in_at: datetime

    @property
    def verified_email(self) -> str | None:
        """The email an admin may find this user by, and who they are in the audit log: only
        one the provider verified (an unverified one is anybody's claim to a name)."""
        return self.email if self.email_verified else None


class ConsoleSession(BaseModel):
    """A signed-in browser, kept on the server so that it can be ended everywhere at once. The
    browser holds a random token; the store holds only the token's hash."""

    model_config = ConfigDict(frozen=True)

    id: str  # shown and ended by this; never the token
    user_id: str
    address: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime  # the absolute end, whatever the activity
    refresh_at: datetime | None = None  # when the provider is asked again whether the user may
    ended_at: datetime | None = None
    end_reason: str | None = None

    def live(self, now: datetime, idle_s: float) -> bool:
        """Whether the session still lets its browser in at `now`."""
        return (self.ended_at is None and now < self.expires_at
                and (now - self.last_seen_at).total_seconds() < idle_s)


# Ids of users (`new_id("usr")`): a person acting through the admin API is told apart from a key
# by it.
USER_ID_PREFIX = "usr-"


@dataclass(frozen=True)
class Person:
    """A signed-in person with access: who they are and the grant they act under now."""

    user: User
    grant: Grant

    @property
    def key(self) -> ApiKey:
        """Their acting key (`acting_key`)."""
        return acting_key(self.user, self.grant)


def acting_key(user: User, grant: Grant) -> ApiKey:
    """The key-shaped view of a signed-in person that the key and usage services scope by. It is
    never stored and has no secret: the endpoint's role check (`api.roles`) has already decided
    what the person may call, and inside those calls an admin, operator or viewer sees as an
    admin key does, a team admin as its team's admin key does."""
    team_admin = grant.role is Role.TEAM_ADMIN
    return ApiKey(id=user.id, name=user.verified_email or user.subject, prefix="sso", last4="",
                  hash="", scope=KeyScope.USER if team_admin else KeyScope.ADMIN,
                  team=grant.team, team_admin=team_admin, created_at=user.created_at,
                  by=f"signed in through {user.issuer}")


def is_person(key: ApiKey) -> bool:
    """Whether `key` is a signed-in person's acting key rather than a stored key."""
    return key.id.startswith(USER_ID_PREFIX)


def who(key: ApiKey) -> str:
    """Who made a change, as the catalog's `by` and the audit log record it: a key by name and
    label, a person by email (or subject) and how they signed in."""
    return f"{key.name} (sso)" if is_person(key) else f"{key.name} ({key.label})"
