"""The routes page: each route's targets as this server sees them, adding a route, removing one."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.admin.routes import ADD_ROUTE, LIST_ROUTES, REMOVE_ROUTE
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint
from llmgw.core.errors import InvalidRequest
from llmgw.core.routes import FailOn, Strategy

HERE = "/ui/routes"
STRATEGIES = tuple(Strategy)
FAIL_ON = tuple(FailOn)


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


async def routes(request: web.Request) -> web.Response:
    """The routes table and, for a visitor who changes things, the add form."""
    listed = (await _call(request, LIST_ROUTES))["data"]
    return render.page(request, "routes.html", routes=listed, strategies=STRATEGIES, fail_on=FAIL_ON)


def targets(form: forms.Form) -> list[dict[str, Any]]:
    """The targets field's models with the weights field's numbers, one each (none: 1 each)."""
    models = forms.names(form, "targets")
    weights = forms.names(form, "weights")
    if not models:
        raise InvalidRequest("'targets' is required", param="targets")
    if weights and len(weights) != len(models):
        raise InvalidRequest(f"'weights' gives {len(weights)} weights for {len(models)} targets",
                             param="weights")
    try:
        numbers = [int(w) for w in weights] or [1] * len(models)
    except ValueError:
        raise InvalidRequest("'weights' takes whole numbers", param="weights") from None
    return [{"model": m, "weight": w} for m, w in zip(models, numbers, strict=True)]


async def add(request: web.Request) -> web.Response:
    """A route in front of catalog models (the server checks they are in the catalog)."""
    form = await forms.read(request)
    # Empty fields are left out, so the server's defaults (the ones the page names) hold.
    fallback = forms.given(on=forms.names(form, "fallback_on") or None,
                           attempts=forms.integer(form, "attempts"))
    retries = forms.integer(form, "retries")
    body = forms.given(name=forms.text(form, "name", required=True), targets=targets(form),
                       strategy=forms.text(form, "strategy"), fallback=fallback or None,
                       retry={"attempts": retries} if retries is not None else None)
    await _call(request, ADD_ROUTE, body=body)
    return render.done(request, HERE)


async def remove(request: web.Request) -> web.Response:
    """Remove a route (the page asks to confirm first)."""
    await _call(request, REMOVE_ROUTE, params={"name": request.match_info["name"]})
    return render.done(request, HERE)
