"""Routes in the admin API: `/admin/v1/routes`, admin keys only."""

from __future__ import annotations

from typing import Any

from llmgw.api.admin.models import by
from llmgw.api.appkeys import ROUTES
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.routes import RouteOut
from llmgw.core.routes import RouteSpec

TAG = "routes"
NAME = "{name:.+}"


def _server_set(payload: dict[str, Any], params: object) -> dict[str, Any]:
    """A route body without the fields the server sets (a route read back carries them)."""
    drop = ("by", "created_at", "updated_at", "status")
    out = {k: v for k, v in payload.items() if k not in drop}
    if isinstance(params, dict) and "name" in params:
        out["name"] = params["name"]
    return out


async def list_routes(call: Call[None, None]) -> DataList[RouteOut]:
    return DataList(data=await call.app[ROUTES].routes())


async def add_route(call: Call[RouteSpec, None]) -> RouteOut:
    return await call.app[ROUTES].put(call.body, by(call.key))


async def replace_route(call: Call[RouteSpec, None]) -> RouteOut:
    return await call.app[ROUTES].put(call.body, by(call.key), replace=True)


async def get_route(call: Call[None, None]) -> RouteOut:
    return await call.app[ROUTES].get(call.params["name"])


async def remove_route(call: Call[None, None]) -> Removed:
    name = call.params["name"]
    await call.app[ROUTES].remove(name)
    return Removed(name=name)


_EXAMPLE = {"name": "chat", "targets": [{"model": "gemma3-270m"}, {"model": "gpt-4o-mini"}],
            "strategy": "priority", "fallback": {"on": ["connect", "5xx", "timeout", "429"]}}

LIST_ROUTES = Endpoint("list_routes", "GET", "/admin/v1/routes",
                       "List routes with each target's state on this server", TAG, list_routes,
                       returns=DataList[RouteOut])
ADD_ROUTE = Endpoint("add_route", "POST", "/admin/v1/routes", "Add a route in front of catalog models",
                     TAG, add_route, body=RouteSpec, shape=_server_set, returns=RouteOut, status=201,
                     example=_EXAMPLE)
REPLACE_ROUTE = Endpoint("replace_route", "PUT", f"/admin/v1/routes/{NAME}", "Change a route", TAG,
                         replace_route, body=RouteSpec, shape=_server_set, returns=RouteOut,
                         example={k: v for k, v in _EXAMPLE.items() if k != "name"})
GET_ROUTE = Endpoint("get_route", "GET", f"/admin/v1/routes/{NAME}",
                     "Show a route, its targets' cooldowns and load on this server", TAG, get_route,
                     returns=RouteOut)
REMOVE_ROUTE = Endpoint("remove_route", "DELETE", f"/admin/v1/routes/{NAME}", "Remove a route", TAG,
                        remove_route, returns=Removed)

ENDPOINTS: list[Endpoint[Any, Any]] = [LIST_ROUTES, ADD_ROUTE, REPLACE_ROUTE, GET_ROUTE, REMOVE_ROUTE]
