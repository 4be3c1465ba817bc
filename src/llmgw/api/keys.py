"""Keys, default limits and usage in the admin API."""

from __future__ import annotations

from dataclasses import asdict
from datetime import date, datetime
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.admin import admin_key, invalid
from llmgw.api.appkeys import GATEWAY, KEYS
from llmgw.api.body import json_response, read_json
from llmgw.core.errors import InvalidRequest
from llmgw.core.protocol import KeyRequest
from llmgw.core.types import ApiKey, Limits, as_utc


def _dump(key: ApiKey) -> dict[str, Any]:
    """A key as lists show it: never its hash."""
    data = key.model_dump(mode="json", exclude={"hash"})
    data["label"] = key.label
    return data


async def create_key(request: web.Request) -> web.Response:
    # Any valid key may mint; KeyAdmin keeps a user key's children within its own grants.
    minter = request.app[GATEWAY].authenticate(request.headers.get("Authorization"))
    _, payload = await read_json(request)
    try:
        req = KeyRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    key, secret = await request.app[KEYS].create(req, minter)
    return json_response({**_dump(key), "key": secret}, status=201)


async def list_keys(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response({"data": [_dump(k) for k in await request.app[KEYS].keys()]})


async def get_key(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(_dump(await request.app[KEYS].find(request.match_info["id"])))


async def revoke_key(request: web.Request) -> web.Response:
    admin_key(request)
    key, beneath = await request.app[KEYS].revoke(request.match_info["id"])
    return json_response({**_dump(key), "revoked_beneath": beneath})


async def rotate_key(request: web.Request) -> web.Response:
    by = admin_key(request)
    key, secret = await request.app[KEYS].rotate(request.match_info["id"], by)
    return json_response({**_dump(key), "key": secret}, status=201)


async def get_default_limits(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response((await request.app[KEYS].default_limits()).model_dump())


async def put_default_limits(request: web.Request) -> web.Response:
    admin_key(request)
    _, payload = await read_json(request)
    try:
        limits = Limits.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    return json_response((await request.app[KEYS].set_default_limits(limits)).model_dump())


async def usage(request: web.Request) -> web.Response:
    admin_key(request)
    q = request.query
    rows = await request.app[KEYS].usage(q.get("key"), q.get("model"), _day(q.get("since")))
    return json_response({"data": [asdict(r) for r in rows]})


def _day(since: str | None) -> str | None:
    """A `since` query as the UTC day it falls on: a date, or a time (UTC when it names no zone)."""
    if not since:
        return None
    try:
        return date.fromisoformat(since).isoformat()
    except ValueError:
        pass
    try:
        return as_utc(datetime.fromisoformat(since)).date().isoformat()
    except ValueError as exc:
        raise InvalidRequest("'since' must be a date (YYYY-MM-DD) or an ISO time",
                             param="since") from exc


def routes() -> list[web.RouteDef]:
    return [
        web.post("/admin/v1/keys", create_key),
        web.get("/admin/v1/keys", list_keys),
        web.get("/admin/v1/keys/{id}", get_key),
        web.post("/admin/v1/keys/{id}/revoke", revoke_key),
        web.post("/admin/v1/keys/{id}/rotate", rotate_key),
        web.get("/admin/v1/limits/default", get_default_limits),
        web.put("/admin/v1/limits/default", put_default_limits),
        web.get("/admin/v1/usage", usage),
    ]
