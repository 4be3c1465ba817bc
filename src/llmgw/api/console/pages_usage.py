"""The usage page: tokens per day, model and key as a chart and a table, and the key's limits."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from llmgw.api.admin.keys import GET_DEFAULT_LIMITS, LIST_KEYS, USAGE
from llmgw.api.admin.teams import LIST_TEAMS
from llmgw.api.console import data, render
from llmgw.api.console.access import root, visitor
from llmgw.core.errors import InvalidRequest
from llmgw.core.types import TEAM_KEY_PREFIX
from llmgw.core.users import Person

PERIODS = (1, 7, 30, 90)


def _days(request: web.Request) -> int:
    raw = request.query.get("days", "7")
    if not raw.isdigit() or int(raw) not in PERIODS:
        raise InvalidRequest(f"days must be one of {', '.join(map(str, PERIODS))}", param="days")
    return int(raw)


async def _rows(request: web.Request, days: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Usage rows since `days` ago (UTC days, today included) and the names of the keys they are
    for, as far as the visitor may see them."""
    app, key = root(request), visitor(request).caller
    today = datetime.now(UTC).date()
    since = (today - timedelta(days=days - 1)).isoformat()
    rows = (await data.call(app, key, USAGE, query={"since": since}))["data"]
    names = {k["id"]: k["name"] for k in (await data.call(app, key, LIST_KEYS))["data"]}
    # What a team's admins sent from the playground is the team's, counted under its own id.
    # Its id names the team; a team admin sees its own team's alone (and may not list teams).
    if any(r["key_id"].startswith(TEAM_KEY_PREFIX) for r in rows):
        acting = key.key if isinstance(key, Person) else key
        if acting.team_admin:
            teams: dict[str, str] = {}
        else:
            listed = (await data.call(app, key, LIST_TEAMS))["data"]
            teams = {TEAM_KEY_PREFIX + t["id"]: t["name"] for t in listed}
        names.update({r["key_id"]: f"team {teams.get(r['key_id'], acting.team or 'removed')} (playground)"
                      for r in rows if r["key_id"].startswith(TEAM_KEY_PREFIX)})
    return sorted(rows, key=lambda r: (r["day"], r["model"], r["key_id"]), reverse=True), names


async def usage(request: web.Request) -> web.Response:
    """The chart (its data comes from /ui/usage/data), the table and the key's limits."""
    days = _days(request)
    rows, names = await _rows(request, days)
    who = visitor(request)
    # The install's defaults are the admin API's to show; a user key is told they apply.
    defaults = (await data.call(root(request), who.caller, GET_DEFAULT_LIMITS)) if who.manages \
        else None
    return render.page(request, "usage.html", rows=rows, names=names, days=days, periods=PERIODS,
                       limits=who.key.limits.model_dump(), defaults=defaults, cache=cache_rates(rows))


def cache_rates(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model with answers from the response cache: its requests, hits, hit rate and the
    tokens the hits spared."""
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        totals = per[r["model"]]
        totals[0] += r["requests"]
        totals[1] += r.get("cache_hits", 0)
        totals[2] += r.get("saved_tokens", 0)
    return [{"model": m, "requests": n, "hits": hits, "rate": f"{hits / n:.0%}" if n else "0%",
             "saved": saved} for m, (n, hits, saved) in sorted(per.items()) if hits]


def chart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Chart.js bar data: tokens per day, one stacked dataset per model."""
    days = sorted({r["day"] for r in rows})
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        per[r["model"]][r["day"]] += r["prompt_tokens"] + r["completion_tokens"]
    return {"unit": "tokens", "labels": days,
            "datasets": [{"label": model, "data": [per[model][d] for d in days]} for model in sorted(per)]}


async def usage_data(request: web.Request) -> web.Response:
    """The chart's data as JSON (same session, same view of usage as the table)."""
    rows, _ = await _rows(request, _days(request))
    return web.json_response(chart(rows))
