"""What each role of a signed-in person may call: the one check between a console session and
the admin API, made on the server for every call (the console's pages only hide what it would
refuse).

- admin: every admin and key endpoint.
- operator: reads everything but keys, usage, users and MCP servers; changes models, nodes, jobs, guard,
  routes and the response cache.
- team-admin: the key endpoints (its team's keys, their limits within the team's, its usage),
  its team, and the model list to pick from.
- viewer: reads what an operator reads; changes nothing.
"""

from __future__ import annotations

from typing import Protocol

from llmgw.core.users import Grant, Role


class Operation(Protocol):
    """What the check reads of an endpoint (`api.endpoints.Endpoint`)."""

    @property
    def name(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def access(self) -> str: ...  # an `Access`: public, key, admin, node or scraper


# The endpoints of keys and their usage, and of the people who sign in: another person's keys
# and roles are never an operator's or a viewer's. MCP servers' too: their answers name the keys
# that may use each, and their tools act in the world.
PRIVATE_TAGS = frozenset({"keys", "users", "mcp"})
# What an operator changes: the install's serving side (models, nodes, jobs, cluster), the guard
# and the routes. Teams and default limits are money and access: an admin's.
OPERATOR_TAGS = frozenset({"admin", "guard", "routes", "cache"})
# A team admin's reads outside the key endpoints (its own team only: `api.admin.teams` checks it).
TEAM_ADMIN_READS = frozenset({"list_models", "get_team"})


def refusal(grant: Grant | None, ep: Operation) -> str | None:
    """Why a person with `grant` may not call `ep`, or None when they may."""
    if ep.access == "public":
        return None
    if grant is None:
        return "your account has no role in this install: ask an admin for one"
    if ep.access not in ("admin", "key"):
        return "this endpoint is for node agents and scrapers, not people"
    role, reads = grant.role, ep.method == "GET"
    if role is Role.ADMIN:
        return None
    if role is Role.TEAM_ADMIN:
        if ep.access == "key" or (reads and ep.name in TEAM_ADMIN_READS):
            return None
        return f"a team admin manages team {grant.team}'s keys and usage only"
    if ep.tag in PRIVATE_TAGS:
        return f"{_an(role)} does not see keys, usage or users" + \
            (" (nor MCP servers)" if ep.tag == "mcp" else "")
    if reads:
        return None
    if role is Role.OPERATOR and ep.tag in OPERATOR_TAGS:
        return None
    return "a viewer changes nothing" if role is Role.VIEWER \
        else "an operator does not change teams, default limits, keys or users"


def _an(role: Role) -> str:
    return f"an {role.value}" if role is Role.OPERATOR else f"a {role.value}"
