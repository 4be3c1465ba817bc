"""The MCP page: upstream MCP servers (where each is, its bundles, whether it is enabled, who may
use it, and a page of its tools) and the tool calls made to them in the last 7 days. Admins
only: its answers name the keys granted each server, and its tools act in the world."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from llmgw.api.admin.mcp import LIST_MCP_SERVERS, MCP_USAGE
from llmgw.api.console import data, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint
from llmgw.api.mcp import SERVER_TOOLS

HERE = "/ui/mcp"
COUNTS = ("calls", "errors", "blocked")


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


async def mcp(request: web.Request) -> web.Response:
    """The servers table and the last 7 days' calls per server and tool."""
    servers = (await _call(request, LIST_MCP_SERVERS))["data"]
    usage = (await _call(request, MCP_USAGE))["data"]
    return render.page(request, "mcp.html", servers=servers, calls=per_tool(usage))


async def tools(request: web.Request) -> web.Response:
    """One server's tools, as it lists them now (asked afresh: a server that fails says so)."""
    found = await _call(request, SERVER_TOOLS, params={"name": request.match_info["name"]})
    return render.page(request, "mcp_tools.html", server=found["server"], tools=found["tools"])


def per_tool(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Usage rows (per key, server, tool and day) summed per server and tool, the most called
    first, with the keys (by name) that called each."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        tool = out.setdefault((r["server"], r["tool"]), {
            "server": r["server"], "tool": r["tool"], "cost": 0.0, "keys": set(),
            **dict.fromkeys(COUNTS, 0)})
        for c in COUNTS:
            tool[c] += r[c]
        tool["cost"] += r["cost"]
        tool["keys"].add(r.get("key_name") or r["key_id"])
    return [{**t, "keys": sorted(t["keys"])}
            for t in sorted(out.values(), key=lambda t: (-t["calls"], t["server"], t["tool"]))]
