"""The servers' side of the stdio MCP servers node agents run: `/agent/v1/mcp`.

A node is told the stdio servers that name it, and believed only about those, and only about
bridges on its own address (the gateway sends the node's engine key there)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from llmgw.control.agents import on_own_address
from llmgw.core.agent_wire import McpSyncRequest, McpSyncResponse
from llmgw.core.clock import Clock
from llmgw.core.errors import Forbidden
from llmgw.core.mcp import McpRun, McpRunState, McpServer
from llmgw.core.types import ApiKey
from llmgw.store.store import Store

logger = logging.getLogger(__name__)


def runs_on(server: McpServer, node_id: str, leads: bool = False) -> bool:
    """Whether `node_id` is where `server` is meant to run now: the node it names, or, when it
    names none, the embedded node of the server that leads (`leads`; on one machine, the one
    server), so that one node runs it, whichever servers the install has."""
    return server.enabled and (server.node == node_id or (server.node is None and leads))


class McpAgentService:
    """Answers `/agent/v1/mcp` on any server (the agent writes only its own node's runs)."""

    def __init__(self, store: Store, clock: Clock, on_change: Callable[[], Awaitable[None]]) -> None:
        self._store = store
        self._clock = clock
        self._on_change = on_change

    async def sync(self, req: McpSyncRequest, token: ApiKey) -> McpSyncResponse:
        """Record the runs of the node `token` is bound to; answer with its stdio servers."""
        changed, servers = await asyncio.to_thread(self._sync, req, token.id)
        if changed:
            await self._on_change()
        return McpSyncResponse(servers=servers)

    def _sync(self, req: McpSyncRequest, token_id: str) -> tuple[bool, list[McpServer]]:
        store, now = self._store, self._clock.now()
        # From the store, not the key cache: the token is bound by the node's first sync.
        node_id = store.keys.get(token_id).node_id
        node = store.nodes.get(node_id) if node_id is not None else None
        if node_id is None or node is None:
            raise Forbidden("this join token has no node yet: the agent syncs first "
                            "(/agent/v1/sync)")
        mine = {s.name: s for s in store.mcp_runs.stdio_servers() if runs_on(s, node_id)}
        changed = False
        for report in req.runs:
            if report.server not in mine:
                # Not this node's (or no longer): its word on it changes nothing.
                logger.warning("node %s reported MCP server %s, which it does not run: ignored",
                               node_id, report.server)
                continue
            report = on_own_address(report, McpRunState.FAILED, f"MCP server {report.server}",
                                    node_id, node.address)
            changed |= store.mcp_runs.report(McpRun(node_id=node_id, **report.model_dump()), now)
        for name in req.stopped:
            changed |= store.mcp_runs.forget(name, node_id)
        return changed, list(mine.values())
