"""Upstream MCP servers in the catalog: adding, changing, listing and removing them, who may use
each, and the tool calls made to them."""

from __future__ import annotations

import asyncio
import fnmatch
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from llmgw.core import redact
from llmgw.core.errors import InvalidRequest
from llmgw.core.mcp import McpServer, McpTransport, McpUsageRow
from llmgw.core.protocol.mcp import McpServerOut, McpServerPatch, McpServerRequest
from llmgw.core.types import ApiKey, KeyScope, Team, ToolGrants
from llmgw.store.service import AdminService

# The days of calls the usage read covers when it is given no first day.
USAGE_DAYS = 7
_SERVER_SET = {"name", "by", "created_at", "updated_at"}
_NAME_WORDS = ("an MCP server's name is 1-32 lower-case letters, digits and '-' (no '_': "
               "clients see its tools as SERVER__TOOL), starting and ending with a letter or digit")


class McpAdmin(AdminService):
    """MCP servers live in the store; every server's MCP gateway follows at its next refresh."""

    async def servers(self) -> list[McpServerOut]:
        return await asyncio.to_thread(self._shown, None)

    async def get(self, name: str) -> McpServerOut:
        await asyncio.to_thread(self._store.mcp.get, name)  # 404 for a server that is not
        return (await asyncio.to_thread(self._shown, name))[0]

    async def add(self, req: McpServerRequest, by: str) -> McpServerOut:
        """Add a server (Conflict when its name is taken); InvalidRequest, in words, when it is
        not one llmgw can reach (a stdio server without a command, a URL with a credential in
        it, ...)."""
        data = req.model_dump(exclude_unset=True)
        if "transport" not in data and data.get("command") and not data.get("url"):
            data["transport"] = McpTransport.STDIO
        server = checked(data)
        await asyncio.to_thread(self._store.mcp.add, server, by, self._clock.now())
        await self._changed()
        return await self.get(server.name)

    async def update(self, name: str, patch: McpServerPatch, by: str) -> McpServerOut:
        """Change the fields `patch` sets (the others stay as they are)."""
        current = await asyncio.to_thread(self._store.mcp.get, name)
        data = {**current.model_dump(exclude=_SERVER_SET), **patch.model_dump(exclude_unset=True),
                "name": name}
        if patch.env:
            # An env sent back as it was read carries `***` for each hidden value: those values
            # stay as they are stored, as an unchanged field does.
            data["env"] = {k: current.env.get(k, v) if v == redact.HIDDEN else v
                           for k, v in patch.env.items()}
        server = checked(data)
        await asyncio.to_thread(self._store.mcp.update, server, by, self._clock.now())
        await self._changed()
        return await self.get(name)

    async def remove(self, name: str) -> None:
        await asyncio.to_thread(self._store.mcp.remove, name)
        await self._changed()

    async def usage(self, since: str | None, server: str | None) -> list[McpUsageRow]:
        """Tool calls per key, server, tool and day, from `since` (default: the last 7 days)."""
        first = since or (self._clock.now() - timedelta(days=USAGE_DAYS - 1)).strftime("%Y-%m-%d")
        return await asyncio.to_thread(self._store.mcp.usage, first, server)

    def _shown(self, only: str | None) -> list[McpServerOut]:
        servers = [s for s in self._store.mcp.list() if only is None or s.name == only]
        keys, teams = self._store.keys.list(), self._store.teams.list()
        now = self._clock.now()
        live = [k for k in keys if k.scope == KeyScope.USER and not k.revoked
                and (k.expires_at is None or k.expires_at > now)]
        by_id = {k.id: k for k in keys}
        team_of = {t.id: t for t in teams}
        return [McpServerOut.of(
            s, keys=sorted(k.name for k in live if key_reaches(k, s.name, by_id, team_of)),
            teams=sorted(t.name for t in teams if reaches(t.tools, s.name)))
            for s in servers]


def checked(data: dict[str, Any]) -> McpServer:
    """`data` as an MCP server, or InvalidRequest saying in words what is wrong with it."""
    try:
        return McpServer.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        message = _NAME_WORDS if where == "name" else \
            str(err["msg"]).removeprefix("Value error, ")
        raise InvalidRequest(f"{where}: {message}" if where else message,
                             param=where or None) from exc


def _server_part(pattern: str) -> tuple[str, str]:
    server, _, tool = pattern.partition("/")
    return server, tool or "*"


def reaches(grants: ToolGrants, server: str) -> bool:
    """Whether `grants` allow some tool of `server`: an allow pattern names it (`github/*`,
    `*/read_*`, `github`) and no deny takes the whole server (`github`, `github/*`, `*`)."""
    allowed = any(fnmatch.fnmatchcase(server, _server_part(p)[0]) for p in grants.allow)
    return allowed and not _denies_all(grants, server)


def _denies_all(grants: ToolGrants, server: str) -> bool:
    return any(fnmatch.fnmatchcase(server, s) and t == "*"
               for s, t in map(_server_part, grants.deny))


def key_reaches(key: ApiKey, server: str, keys: dict[str, ApiKey], teams: dict[str, Team],
                seen: frozenset[str] = frozenset()) -> bool:
    """Whether a user key may use some tool of `server`, as the MCP gateway grants: its own
    allow (within its team's, when the team has one) or else its team's; no deny of its own or
    its team's taking the whole server; and, for a minted key, its minter may as well."""
    team = teams.get(key.team_id) if key.team_id else None
    team_tools = team.tools if team is not None else ToolGrants()
    if _denies_all(key.tools, server) or _denies_all(team_tools, server):
        return False
    if key.tools.allow:
        ok = reaches(key.tools, server) and (not team_tools.allow or reaches(team_tools, server))
    else:
        ok = reaches(team_tools, server)
    minter = keys.get(key.minted_by) if key.minted_by else None
    if ok and minter is not None and minter.scope == KeyScope.USER and minter.id not in seen:
        return key_reaches(minter, server, keys, teams, seen | {key.id})
    return ok
