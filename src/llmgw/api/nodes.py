"""Nodes in the admin API: `/admin/v1/nodes`, admin keys only."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.admin import admin_key, invalid
from llmgw.api.appkeys import NODES
from llmgw.api.body import json_response, read_json
from llmgw.control.node_admin import NodeDetail, NodeView
from llmgw.core.errors import InvalidRequest
from llmgw.core.protocol import LabelRequest


def dump_view(view: NodeView) -> dict[str, Any]:
    """A node as the API shows it: its row, plus status, heartbeat age and replica count."""
    return {
        **view.node.model_dump(mode="json"),
        "status": view.status.value,
        "heartbeat_age_s": view.heartbeat_age_s,
        "replica_count": view.replica_count,
    }


def _dump_detail(detail: NodeDetail) -> dict[str, Any]:
    return {**dump_view(detail.view),
            "replicas": [r.model_dump(mode="json") for r in detail.replicas]}


def _flag(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw not in ("true", "1", "false", "0"):
        raise InvalidRequest(f"'{name}' must be true or false", param=name)
    return raw in ("true", "1")


async def list_nodes(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response({"data": [dump_view(v) for v in await request.app[NODES].list()]})


async def show_node(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(_dump_detail(await request.app[NODES].show(request.match_info["id"])))


async def label_node(request: web.Request) -> web.Response:
    admin_key(request)
    _, payload = await read_json(request)
    try:
        req = LabelRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    view = await request.app[NODES].label(request.match_info["id"], req.set, req.remove)
    return json_response(dump_view(view))


async def cordon_node(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(dump_view(await request.app[NODES].cordon(request.match_info["id"])))


async def uncordon_node(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(dump_view(await request.app[NODES].uncordon(request.match_info["id"])))


async def drain_node(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(dump_view(await request.app[NODES].drain(request.match_info["id"])))


async def remove_node(request: web.Request) -> web.Response:
    admin_key(request)
    node_id = request.match_info["id"]
    await request.app[NODES].remove(node_id, force=_flag(request, "force"))
    return json_response({"id": node_id, "removed": True})


def routes() -> list[web.RouteDef]:
    """The node routes."""
    return [
        web.get("/admin/v1/nodes", list_nodes),
        web.get("/admin/v1/nodes/{id}", show_node),
        web.delete("/admin/v1/nodes/{id}", remove_node),
        web.post("/admin/v1/nodes/{id}/labels", label_node),
        web.post("/admin/v1/nodes/{id}/cordon", cordon_node),
        web.post("/admin/v1/nodes/{id}/uncordon", uncordon_node),
        web.post("/admin/v1/nodes/{id}/drain", drain_node),
    ]
