"""The agent API: `/agent/v1/*`, for node agents holding a join token.

Join tokens only, not admin keys: a token is bound to its node, and an admin key on a node's
command line would grant far more than reporting as one machine."""

from __future__ import annotations

from typing import Any

from llmgw.api.appkeys import AGENTS, CHANGES, MCP_AGENTS
from llmgw.api.endpoints import Access, Call, Endpoint
from llmgw.core.agent_wire import (
    Changes,
    McpSyncRequest,
    McpSyncResponse,
    SyncRequest,
    SyncResponse,
)
from llmgw.core.protocol.nodes import ChangesQuery

TAG = "agent"


async def sync(call: Call[SyncRequest, None]) -> SyncResponse:
    return await call.app[AGENTS].sync(call.body, call.caller)


async def mcp_sync(call: Call[McpSyncRequest, None]) -> McpSyncResponse:
    return await call.app[MCP_AGENTS].sync(call.body, call.caller)


async def changes(call: Call[None, ChangesQuery]) -> Changes:
    """Answer once this server's view of the store is past `since` (a placement, a stop, any
    change), or after `wait` seconds: the agent then syncs at once instead of at its next round."""
    return Changes(revision=await call.app[CHANGES](call.query.since, call.query.wait))


SYNC = Endpoint("agent_sync", "POST", "/agent/v1/sync",
                "A node agent's heartbeat, reports and assignments", TAG, sync, access=Access.NODE,
                body=SyncRequest, returns=SyncResponse)
WATCH_CHANGES = Endpoint("agent_changes", "GET", "/agent/v1/changes",
                         "Held until this server's view of the store is past `since` (or `wait` "
                         "seconds, at most 30, pass); answers the revision then", TAG, changes,
                         access=Access.NODE, query=ChangesQuery, returns=Changes)

MCP_SYNC = Endpoint("agent_mcp_sync", "POST", "/agent/v1/mcp",
                    "A node agent's stdio MCP servers: their runs' reports in, the servers it "
                    "runs out", TAG, mcp_sync, access=Access.NODE, body=McpSyncRequest,
                    returns=McpSyncResponse)

ENDPOINTS: list[Endpoint[Any, Any]] = [SYNC, MCP_SYNC, WATCH_CHANGES]
