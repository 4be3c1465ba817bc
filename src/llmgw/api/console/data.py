"""What the console shows, read as the API would answer the visitor's key: each function returns
the JSON shape of its admin endpoint (dicts, so templates read one shape)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.appkeys import CATALOG, CLUSTER, GUARD_ADMIN, NODES
from llmgw.api.nodes import dump_view
from llmgw.core.types import ApiKey


async def cluster(app: web.Application, key: ApiKey) -> dict[str, Any]:
    return await app[CLUSTER]()


async def nodes(app: web.Application, key: ApiKey) -> list[dict[str, Any]]:
    return [dump_view(v) for v in await app[NODES].list()]


async def replicas(app: web.Application, key: ApiKey, model: str | None = None) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in await app[CATALOG].replicas(model)]


async def guard_switches(app: web.Application, key: ApiKey) -> dict[str, Any]:
    return dict(await app[GUARD_ADMIN].switches())


async def usage_summary(app: web.Application, key: ApiKey) -> list[dict[str, Any]]:
    return []
