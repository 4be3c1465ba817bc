"""Upstream MCP servers in the admin API: `/admin/v1/mcp/servers` and the tool calls made to
them (`/admin/v1/mcp/usage`), admin keys only. No answer holds a credential: only where it is
read (an env variable's or a file's name)."""

from __future__ import annotations

from typing import Any

from llmgw.api.admin.keys import day
from llmgw.api.admin.models import by
from llmgw.api.appkeys import KEYS, MCP_ADMIN
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.mcp import (
    McpServerOut,
    McpServerPatch,
    McpServerRequest,
    McpUsageOut,
    McpUsageQuery,
)

TAG = "mcp"


def _server_set(payload: dict[str, Any], _params: object) -> dict[str, Any]:
    """A server body without what the server sets (a server read back carries them)."""
    drop = ("by", "created_at", "updated_at", "keys", "teams")
    return {k: v for k, v in payload.items() if k not in drop}


def _patch(payload: dict[str, Any], params: object) -> dict[str, Any]:
    return {k: v for k, v in _server_set(payload, params).items() if k != "name"}


async def list_servers(call: Call[None, None]) -> DataList[McpServerOut]:
    return DataList(data=await call.app[MCP_ADMIN].servers())


async def add_server(call: Call[McpServerRequest, None]) -> McpServerOut:
    return await call.app[MCP_ADMIN].add(call.body, by(call.key))


async def get_server(call: Call[None, None]) -> McpServerOut:
    return await call.app[MCP_ADMIN].get(call.params["name"])


async def update_server(call: Call[McpServerPatch, None]) -> McpServerOut:
    return await call.app[MCP_ADMIN].update(call.params["name"], call.body, by(call.key))


async def remove_server(call: Call[None, None]) -> Removed:
    name = call.params["name"]
    await call.app[MCP_ADMIN].remove(name)
    return Removed(name=name)


async def usage(call: Call[None, McpUsageQuery]) -> DataList[McpUsageOut]:
    q = call.query
    rows = await call.app[MCP_ADMIN].usage(day(q.since), q.server)
    names = {k.id: k.name for k in await call.app[KEYS].keys(call.key)}
    return DataList(data=[McpUsageOut(**dict(r), key_name=names.get(r.key_id, "")) for r in rows])


_EXAMPLE = {"name": "github", "url": "https://api.githubcopilot.com/mcp/",
            "credential": {"env": "GITHUB_PAT"}, "bundles": ["dev"], "max_concurrency": 16}

LIST_MCP_SERVERS = Endpoint("list_mcp_servers", "GET", "/admin/v1/mcp/servers",
                            "List upstream MCP servers and who may use each", TAG, list_servers,
                            returns=DataList[McpServerOut])
ADD_MCP_SERVER = Endpoint("add_mcp_server", "POST", "/admin/v1/mcp/servers",
                          "Add an upstream MCP server (by URL, or a command run over stdio)", TAG,
                          add_server, body=McpServerRequest, shape=_server_set,
                          returns=McpServerOut, status=201, example=_EXAMPLE)
GET_MCP_SERVER = Endpoint("get_mcp_server", "GET", "/admin/v1/mcp/servers/{name}",
                          "Show an upstream MCP server", TAG, get_server, returns=McpServerOut)
UPDATE_MCP_SERVER = Endpoint("update_mcp_server", "PATCH", "/admin/v1/mcp/servers/{name}",
                             "Change some fields of an upstream MCP server", TAG, update_server,
                             body=McpServerPatch, shape=_patch, returns=McpServerOut,
                             example={"enabled": False})
REMOVE_MCP_SERVER = Endpoint("remove_mcp_server", "DELETE", "/admin/v1/mcp/servers/{name}",
                             "Remove an upstream MCP server", TAG, remove_server, returns=Removed)
MCP_USAGE = Endpoint("mcp_usage", "GET", "/admin/v1/mcp/usage",
                     "Tool calls per key, server, tool and day (default: the last 7 days)", TAG,
                     usage, query=McpUsageQuery, returns=DataList[McpUsageOut])

ENDPOINTS: list[Endpoint[Any, Any]] = [LIST_MCP_SERVERS, ADD_MCP_SERVER, GET_MCP_SERVER,
                                       UPDATE_MCP_SERVER, REMOVE_MCP_SERVER, MCP_USAGE]
