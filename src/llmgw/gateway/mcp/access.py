"""Who may use which MCP tool: one rule, for `tools/list` and `tools/call` alike.

- a node (or metrics) key: nothing;
- a deny in the key's or its team's grants refuses;
- an admin key: anything else;
- a user key needs an allow: its own (and, when its team has an allow list, the team's too:
  the team is a ceiling), or, without an allow of its own, its team's. A key in no team and
  without an allow may use nothing: tools act in the world, so the least is the default;
- a minted key: only what every key above it (its minter, walked up `minted_by`) may use too.

Grants match `SERVER/NAME` (`core.types.ToolGrants`). Prompts are matched as tools are (by
`SERVER/PROMPT`); a server's resources are shown to keys that may use the whole server
(`SERVER/*`), as they belong to no one tool.
"""

from __future__ import annotations

from llmgw.core.types import ApiKey, KeyScope, Team
from llmgw.gateway.auth import KeyCache, is_team


def may_use(keys: KeyCache, key: ApiKey, server: str, name: str) -> bool:
    """Whether `key` may use `server`'s tool (or prompt) `name` now."""
    return all(_own(keys, k, server, name) for k in keys.chain(key) if not is_team(k))


def may_read(keys: KeyCache, key: ApiKey, server: str) -> bool:
    """Whether `key` may list and read `server`'s resources: it may use the whole server."""
    return may_use(keys, key, server, "*")


def _own(keys: KeyCache, key: ApiKey, server: str, name: str) -> bool:
    if key.scope not in (KeyScope.ADMIN, KeyScope.USER):
        return False
    team: Team | None = None
    if key.team_id is not None:
        team = keys.teams.get(key.team_id)
        if team is None:  # its team is gone: nothing until an admin moves it (as for models)
            return False
    if key.tools.denies(server, name) or (team is not None and team.tools.denies(server, name)):
        return False
    if key.scope is KeyScope.ADMIN:
        return True
    if key.tools.allow:
        ceiling = team is None or not team.tools.allow or team.tools.allows(server, name)
        return key.tools.allows(server, name) and ceiling
    return team is not None and team.tools.allows(server, name)
