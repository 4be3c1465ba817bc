"""Serve jobs in the admin API: `/admin/v1/jobs`."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.admin import admin_key, by, invalid
from llmgw.api.appkeys import JOBS
from llmgw.api.body import json_response, read_json
from llmgw.core.jobs import ServeJob
from llmgw.core.protocol import ServeRequest


def _dump(job: ServeJob) -> dict[str, Any]:
    return {**job.model_dump(mode="json"), "model": job.model}



async def start_job(request: web.Request) -> web.Response:
    key = admin_key(request)
    _, payload = await read_json(request)
    payload["by"] = by(key)
    try:
        serve = ServeRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    job = await request.app[JOBS].start(serve)
    return json_response(_dump(job), status=201)


async def list_jobs(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response({"data": [_dump(j) for j in await request.app[JOBS].jobs()]})


async def get_job(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(_dump(await request.app[JOBS].get(request.match_info["id"])))


async def cancel_job(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(_dump(await request.app[JOBS].cancel(request.match_info["id"])))


def routes() -> list[web.RouteDef]:
    return [
        web.post("/admin/v1/jobs", start_job),
        web.get("/admin/v1/jobs", list_jobs),
        web.get("/admin/v1/jobs/{id}", get_job),
        web.post("/admin/v1/jobs/{id}/cancel", cancel_job),
    ]
