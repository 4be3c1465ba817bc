"""The admin API: `/admin/v1/*`, admin keys only."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.appkeys import CATALOG, CLUSTER, GATEWAY
from llmgw.api.body import json_response, read_json
from llmgw.core.errors import InvalidRequest
from llmgw.core.protocol import ScaleRequest
from llmgw.core.types import ApiKey, Model
from llmgw.gateway.auth import require_admin


def admin_key(request: web.Request) -> ApiKey:
    key = request.app[GATEWAY].authenticate(request.headers.get("Authorization"))
    require_admin(key)
    return key


def by(key: ApiKey) -> str:
    return f"{key.name} ({key.label})"


def invalid(exc: ValidationError) -> InvalidRequest:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or None
    return InvalidRequest(f"{where + ': ' if where else ''}{first['msg']}", param=where)


def _dump(model: Model) -> dict[str, Any]:
    return model.model_dump(mode="json")


async def list_models(request: web.Request) -> web.Response:
    admin_key(request)
    catalog = request.app[CATALOG]
    models = await catalog.models()
    states = await catalog.states(models)
    return json_response({"data": [_dump(m) | {"state": states[m.name]} for m in models]})


async def add_model(request: web.Request) -> web.Response:
    key = admin_key(request)
    _, payload = await read_json(request)
    for field in ("by", "created_at", "updated_at"):
        payload.pop(field, None)
    try:
        model = Model.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    added = await request.app[CATALOG].add(model, by(key))
    return json_response(_dump(added), status=201)


async def get_model(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(_dump(await request.app[CATALOG].get(request.match_info["name"])))


async def remove_model(request: web.Request) -> web.Response:
    admin_key(request)
    name = request.match_info["name"]
    await request.app[CATALOG].remove(name)
    return json_response({"name": name, "removed": True})


async def scale_model(request: web.Request) -> web.Response:
    key = admin_key(request)
    _, payload = await read_json(request)
    try:
        req = ScaleRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    if req.max is not None and req.max < req.min:
        raise InvalidRequest(f"max ({req.max}) is below min ({req.min})", param="max")
    idle = req.idle_s if "idle_s" in req.model_fields_set else ...
    model = await request.app[CATALOG].scale(request.match_info["name"], req.min, req.max, by(key),
                                             idle)
    return json_response(_dump(model))


async def model_resources(request: web.Request) -> web.Response:
    admin_key(request)
    res = await request.app[CATALOG].resources(request.match_info["name"])
    return json_response(
        {
            "model": _dump(res.model),
            "placement": [asdict(f) for f in res.placement],
            "replicas": [r.model_dump(mode="json") for r in res.replicas],
            "nodes": [n.model_dump(mode="json") for n in res.nodes],
            "estimates": {
                name: {"total_gb": e.total_gb, "parts": e.parts(), "describe": e.describe()}
                for name, e in res.estimates.items()
            },
            "evictions": [e.model_dump(mode="json") for e in res.evictions],
        }
    )


async def list_replicas(request: web.Request) -> web.Response:
    admin_key(request)
    replicas = await request.app[CATALOG].replicas(request.query.get("model"))
    return json_response({"data": [r.model_dump(mode="json") for r in replicas]})


async def cluster(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(await request.app[CLUSTER]())


def routes() -> list[web.RouteDef]:
    """The admin routes. Model names may contain '/', so the name pattern is greedy and the
    routes with a suffix come first."""
    name = "{name:.+}"
    return [
        web.get("/admin/v1/models", list_models),
        web.post("/admin/v1/models", add_model),
        web.get(f"/admin/v1/models/{name}/resources", model_resources),
        web.post(f"/admin/v1/models/{name}/scale", scale_model),
        web.get(f"/admin/v1/models/{name}", get_model),
        web.delete(f"/admin/v1/models/{name}", remove_model),
        web.get("/admin/v1/replicas", list_replicas),
        web.get("/admin/v1/cluster", cluster),
    ]
