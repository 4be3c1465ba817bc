"""Who is looking at the console: the signed-in key or person and the CSRF token, attached to the
request."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from llmgw.core.types import ApiKey, KeyScope
from llmgw.core.users import Person, Role


@dataclass(frozen=True)
class Visitor:
    """A signed-in browser: its key (as the gateway's snapshot has it now), or the person signed
    in through the identity provider (then `key` is their acting key); and its CSRF token.

    The properties only choose what a page shows: every call a page makes is checked on the
    server by the endpoint it calls (`data.call`), as `caller`."""

    key: ApiKey
    csrf: str
    person: Person | None = None

    @property
    def caller(self) -> ApiKey | Person:
        """Whom the admin API is called as."""
        return self.person if self.person is not None else self.key

    @property
    def admin(self) -> bool:
        """Whether the install's pages (models, nodes, guard, teams, routes) are shown."""
        return self.key.scope == KeyScope.ADMIN

    @property
    def role(self) -> Role | None:
        """A person's role; None for a key."""
        return self.person.grant.role if self.person is not None else None

    @property
    def name(self) -> str:
        """How the page names who is signed in."""
        if self.person is not None:
            return f"{self.key.name} ({self.person.grant})"
        return f"{self.key.name} ({self.key.label})"

    @property
    def sees_keys(self) -> bool:
        """Whether keys and usage are shown: keys, admins and team admins."""
        return self.role in (None, Role.ADMIN, Role.TEAM_ADMIN)

    @property
    def changes(self) -> bool:
        """Whether the install's forms are shown (a viewer reads only)."""
        return self.role is not Role.VIEWER

    @property
    def manages(self) -> bool:
        """Whether teams, users and default limits can be changed: admin keys and admins."""
        return self.admin and self.role in (None, Role.ADMIN)

    @property
    def plays(self) -> bool:
        """Whether the playground is shown: a viewer sends no requests (`Gateway.sender`)."""
        return self.role is not Role.VIEWER


VISITOR = web.RequestKey("console_visitor", Visitor)
