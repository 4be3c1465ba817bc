"""Where each upstream MCP server listens, and what proves llmgw to it.

A remote server: its URL, and its credential (read at each call). A stdio server: the bridge of
its ready run on a node (`mcp_runs`, in the routing snapshot), which takes that node's engine
key as engine processes do (`core.engine_keys`); None while it has no ready run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from llmgw.core.engine_keys import EngineKeys
from llmgw.core.mcp import McpRun, McpServer, McpTransport
from llmgw.gateway.mcp.credentials import credential_header


class Endpoints:
    """Endpoints and headers of upstream servers, from the snapshot's ready stdio runs."""

    def __init__(self, runs: Callable[[], Mapping[str, McpRun]],
                 engine_keys: EngineKeys | None) -> None:
        self._runs = runs
        self._engine_keys = engine_keys

    def endpoint_of(self, server: McpServer) -> str | None:
        """Where `server` listens now; None for a stdio server without a ready run."""
        if server.transport is not McpTransport.STDIO:
            return server.url
        run = self._runs().get(server.name)
        return run.endpoint if run is not None else None

    def headers_of(self, server: McpServer) -> dict[str, str]:
        """What llmgw sends `server` to be let in."""
        if server.transport is not McpTransport.STDIO:
            return credential_header(server)
        run = self._runs().get(server.name)
        if run is None or self._engine_keys is None:
            return {}
        return dict(self._engine_keys.headers(run.node_id))
