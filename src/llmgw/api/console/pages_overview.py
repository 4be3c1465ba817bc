"""The overview page and its live fragment."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.appkeys import GATEWAY, METRICS
from llmgw.api.console import data, render
from llmgw.api.console.access import root, visitor
from llmgw.api.console.traffic import Traffic

TRAFFIC = web.AppKey("console_traffic", Traffic)


async def _context(request: web.Request) -> dict[str, Any]:
    who = visitor(request)
    app = root(request)
    if not who.admin:
        return {"models": app[GATEWAY].models(who.key),
                "usage": await data.usage_summary(app, who.key)}
    return {
        "cluster": await data.cluster(app, who.key),
        "nodes": await data.nodes(app, who.key),
        "replicas": await data.replicas(app, who.key),
        "guard": await data.guard_switches(app, who.key),
        "traffic": request.app[TRAFFIC].sample(app[METRICS]),
    }


async def overview(request: web.Request) -> web.Response:
    """Servers, nodes, replicas, traffic and the guard (admin); the key's models and usage (user)."""
    return render.page(request, "overview.html", **await _context(request))


async def live(request: web.Request) -> web.Response:
    """The overview's tables alone, for htmx to swap in every two seconds."""
    return render.page(request, "overview_live.html", **await _context(request))
