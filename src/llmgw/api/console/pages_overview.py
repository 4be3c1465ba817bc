"""The overview page and its live fragment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from llmgw.api.admin.guard import GUARD_OVERVIEW
from llmgw.api.admin.keys import USAGE
from llmgw.api.admin.models import CLUSTER_STATUS, LIST_REPLICAS
from llmgw.api.admin.nodes import LIST_NODES
from llmgw.api.appkeys import GATEWAY, METRICS, METRICS_PEERS
from llmgw.api.console import data, render
from llmgw.api.console.access import root, visitor
from llmgw.api.console.traffic import Traffic
from llmgw.core.types import TEAM_KEY_PREFIX
from llmgw.gateway.metrics import Metrics, merged
from llmgw.gateway.service import Gateway

TRAFFIC = web.AppKey("console_traffic", Traffic)
# A user key's overview sums its usage over this many days.
USAGE_DAYS = 30


async def _context(request: web.Request) -> dict[str, Any]:
    who = visitor(request)
    app = root(request)
    key = who.caller
    if not who.admin:
        since = (datetime.now(UTC).date() - timedelta(days=USAGE_DAYS - 1)).isoformat()
        rows = (await data.call(app, key, USAGE, query={"since": since}))["data"]
        return {"models": app[GATEWAY].models(who.key), "usage": usage_by_model(rows),
                "usage_days": USAGE_DAYS}
    metrics = await _all_workers(app)
    return {
        "cluster": await data.call(app, key, CLUSTER_STATUS),
        "nodes": (await data.call(app, key, LIST_NODES))["data"],
        "replicas": (await data.call(app, key, LIST_REPLICAS))["data"],
        "guard": await data.call(app, key, GUARD_OVERVIEW),
        "traffic": request.app[TRAFFIC].sample(metrics),
        "held": held_by_tenant(app[GATEWAY], metrics.held()),
    }


async def _all_workers(app: web.Application) -> Metrics:
    """The server's metrics, every worker's summed (this process's alone with one worker)."""
    peers = app.get(METRICS_PEERS)
    return merged(app[METRICS], await peers()) if peers is not None else app[METRICS]


def held_by_tenant(gateway: Gateway, held: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """The requests held per model and tenant while the model's slots are all busy, each tenant
    named as people know it: a team by its name, a key outside teams by its id."""
    rows = []
    for (model, tenant), n in held.items():
        who = tenant.replace(":", " ", 1)
        if tenant.startswith(TEAM_KEY_PREFIX):
            team = gateway.team(tenant.removeprefix(TEAM_KEY_PREFIX))
            who = f"team {team.name}" if team is not None else "a removed team"
        rows.append({"model": model, "tenant": tenant, "who": who, "held": n})
    return rows


def usage_by_model(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Usage rows (per key, model and day) summed per model."""
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        t = totals.setdefault(row["model"], {"model": row["model"], "requests": 0, "prompt_tokens": 0,
                                             "completion_tokens": 0, "errors": 0, "blocked": 0})
        for field in ("requests", "prompt_tokens", "completion_tokens", "errors", "blocked"):
            t[field] += row.get(field, 0)
    return sorted(totals.values(), key=lambda t: t["model"])


async def overview(request: web.Request) -> web.Response:
    """Servers, nodes, replicas, traffic and the guard (admin); the key's models and usage (user)."""
    return render.page(request, "overview.html", **await _context(request))


async def live(request: web.Request) -> web.Response:
    """The overview's tables alone, for htmx to swap in every two seconds."""
    return render.page(request, "overview_live.html", **await _context(request))
