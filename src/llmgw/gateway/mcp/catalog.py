"""The upstream servers a request may reach, and their tools, prompts and resources as this
process last saw them.

Lists are fetched from each server when first asked for and kept `LIST_TTL_S` (a server that
changes its tools is seen within that); a server that fails to answer is left out of the
aggregate (logged once while it keeps failing) and asked again after `RETRY_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmgw.core.errors import LlmgwError, McpRefused
from llmgw.core.mcp import McpServer, McpTransport
from llmgw.gateway.mcp import wire
from llmgw.gateway.mcp.upstream import McpClient

logger = logging.getLogger(__name__)

LIST_TTL_S = 30.0
RETRY_S = 5.0
# Pages of a list llmgw follows at most (an upstream's `nextCursor`).
MAX_PAGES = 50

# The lists llmgw aggregates: method, and the field of the result that holds the items.
TOOLS = ("tools/list", "tools")
PROMPTS = ("prompts/list", "prompts")
RESOURCES = ("resources/list", "resources")
TEMPLATES = ("resources/templates/list", "resourceTemplates")

# Where a server listens: its URL for a remote one; for a stdio one, its ready run's bridge
# (None while it has none: the server is unavailable).
EndpointOf = Callable[[McpServer], str | None]


def remote_endpoint(server: McpServer) -> str | None:
    """A remote server's URL; None for a stdio server (`endpoints.Endpoints` finds its run)."""
    return None if server.transport is McpTransport.STDIO else server.url


def in_bundle(server: McpServer, bundle: str | None) -> bool:
    """Whether `server` is served on `/mcp` (bundle None: every enabled server) or
    `/mcp/BUNDLE`."""
    return server.enabled and (bundle is None or bundle in server.bundles)


@dataclass(slots=True)
class _Cached:
    server: McpServer  # the spec the list was fetched under: a changed spec fetches again
    items: list[dict[str, Any]] | None  # None: the fetch failed
    until: float


class McpCatalog:
    """The servers (from the snapshot) and their lists (fetched, then kept briefly)."""

    def __init__(self, client: McpClient, servers: Callable[[], Mapping[str, McpServer]],
                 endpoint_of: EndpointOf = remote_endpoint,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self._servers = servers
        self.endpoint_of = endpoint_of
        self._now = monotonic
        self._lists: dict[tuple[str, str], _Cached] = {}
        self._failing: set[tuple[str, str]] = set()

    def servers(self, bundle: str | None) -> list[McpServer]:
        """The enabled servers of `bundle` (None: all of them), by name."""
        return [s for _, s in sorted(self._servers().items()) if in_bundle(s, bundle)]

    def server(self, name: str, bundle: str | None) -> McpServer | None:
        found = self._servers().get(name)
        return found if found is not None and in_bundle(found, bundle) else None

    async def gather(self, servers: list[McpServer], which: tuple[str, str]
                     ) -> list[tuple[McpServer, list[dict[str, Any]]]]:
        """Each server's list `which` (TOOLS, PROMPTS, ...), those that answered, in order."""
        found = await asyncio.gather(*(self.items(s, which) for s in servers))
        return [(s, items) for s, items in zip(servers, found, strict=True) if items is not None]

    async def items(self, server: McpServer, which: tuple[str, str], *, fresh: bool = False
                    ) -> list[dict[str, Any]] | None:
        """`server`'s list `which`, from this process's copy while it is recent; None when the
        server is unavailable or failed to answer."""
        key = (server.name, which[0])
        cached = self._lists.get(key)
        now = self._now()
        if not fresh and cached is not None and cached.server == server and cached.until > now:
            return cached.items
        endpoint = self.endpoint_of(server)
        items: list[dict[str, Any]] | None = None
        if endpoint is not None:
            items = await self._fetch(server, endpoint, which)
        self._lists[key] = _Cached(server, items, now + (LIST_TTL_S if items is not None else RETRY_S))
        return items

    async def _fetch(self, server: McpServer, endpoint: str, which: tuple[str, str]
                     ) -> list[dict[str, Any]] | None:
        method, field = which
        key = (server.name, method)
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_PAGES):
                answer = await self.client.request(server, endpoint, method,
                                                   {"cursor": cursor} if cursor else None)
                page = answer.result.get(field)
                if isinstance(page, list):
                    items.extend(i for i in page if isinstance(i, dict))
                nxt = answer.result.get("nextCursor")
                if not isinstance(nxt, str) or not nxt:
                    break
                cursor = nxt
        except McpRefused as exc:
            if exc.rpc_code == wire.METHOD_NOT_FOUND:  # a server without prompts, say
                return []
            self._failed(server, method, exc)
            return None
        except LlmgwError as exc:
            self._failed(server, method, exc)
            return None
        if key in self._failing:
            self._failing.discard(key)
            logger.info("MCP server %s: %s answers again", server.name, method)
        return items

    def _failed(self, server: McpServer, method: str, exc: LlmgwError) -> None:
        key = (server.name, method)
        if key not in self._failing:
            self._failing.add(key)
            logger.warning("MCP server %s: %s failed, its items are left out: %s",
                           server.name, method, exc.message)
