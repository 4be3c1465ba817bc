"""The teams page: each team's models, limits, keys and tokens used; adding and removing teams
(admins only: teams are money and access)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.admin.teams import ADD_TEAM, LIST_TEAMS, REMOVE_TEAM
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint

HERE = "/ui/teams"
# The limits the add form asks for, as the API names them, with the page's labels.
LIMITS = (("rpm", "Requests per minute"), ("tpm", "Tokens per minute"),
          ("tokens_per_day", "Tokens per day"), ("tokens_per_month", "Tokens per month"),
          ("tool_calls_per_minute", "Tool calls per minute"), ("tool_concurrent", "Tool calls in flight"))


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


async def teams(request: web.Request) -> web.Response:
    """The teams table and, for an admin, the add form."""
    listed = (await _call(request, LIST_TEAMS))["data"]
    return render.page(request, "teams.html", teams=listed, limits=LIMITS)


async def add(request: web.Request) -> web.Response:
    """A new team with its models, limits (empty: none of that kind) and weight."""
    form = await forms.read(request)
    limits = forms.given(**{name: forms.integer(form, name) for name, _ in LIMITS})
    body = forms.given(name=forms.text(form, "name", required=True),
                       models=forms.names(form, "models") or None, limits=limits or None,
                       weight=forms.number(form, "weight"), note=forms.text(form, "note"),
                       tools=forms.grants(form))
    await _call(request, ADD_TEAM, body=body)
    return render.done(request, HERE)


async def remove(request: web.Request) -> web.Response:
    """Remove a team (the server refuses while it has live keys)."""
    await _call(request, REMOVE_TEAM, params={"name": request.match_info["name"]})
    return render.done(request, HERE)
