"""Guard administration in the admin API: `/admin/v1/guard/*`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.admin import admin_key, by, invalid
from llmgw.api.appkeys import GUARD, GUARD_ADMIN, JUDGE_STATUS
from llmgw.api.body import json_response, read_json
from llmgw.core.errors import InvalidRequest
from llmgw.core.guard import Direction, JudgeSpec, Policy
from llmgw.core.protocol import EnableJudge, JudgmentRequest, SwitchRequest
from llmgw.core.types import as_utc
from llmgw.guard.prompts import Turn


def _policy(p: Policy) -> dict[str, Any]:
    return p.model_dump(mode="json")


async def overview(request: web.Request) -> web.Response:
    admin_key(request)
    ga = request.app[GUARD_ADMIN]
    switches = await ga.switches()
    return json_response({**switches, "policies": [_policy(p) for p in await ga.policies()]})


async def set_switches(request: web.Request) -> web.Response:
    admin_key(request)
    _, payload = await read_json(request)
    try:
        req = SwitchRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    ga = request.app[GUARD_ADMIN]
    for name, value in req.model_dump(exclude_none=True).items():
        await ga.set_switch(name, value)
    return json_response(await ga.switches())


async def list_policies(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response({"data": [_policy(p) for p in await request.app[GUARD_ADMIN].policies()]})


async def get_policy(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response(_policy(await request.app[GUARD_ADMIN].policy(request.match_info["name"])))


async def put_policy(request: web.Request) -> web.Response:
    key = admin_key(request)
    _, payload = await read_json(request)
    payload = {**payload, "name": request.match_info["name"]}
    for field in ("by", "updated_at"):
        payload.pop(field, None)
    try:
        policy = Policy.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    return json_response(_policy(await request.app[GUARD_ADMIN].set_policy(policy, by(key))))


async def delete_policy(request: web.Request) -> web.Response:
    admin_key(request)
    name = request.match_info["name"]
    await request.app[GUARD_ADMIN].remove_policy(name)
    return json_response({"name": name, "removed": True})


async def judges(request: web.Request) -> web.Response:
    admin_key(request)
    return json_response({"data": await request.app[JUDGE_STATUS]()})


async def enable_judge(request: web.Request) -> web.Response:
    key = admin_key(request)
    _, payload = await read_json(request)
    try:
        req = EnableJudge.model_validate(payload)
        name = req.name or req.file.rsplit("/", 1)[-1].removesuffix(".gguf").lower()
        spec = JudgeSpec(name=name, repo=req.repo, file=req.file, size_gb=req.size_gb, gpu=req.gpu,
                         format=req.format)
    except ValidationError as exc:
        raise invalid(exc) from exc
    await request.app[GUARD_ADMIN].enable_judge(spec, by(key))
    return json_response(spec.model_dump(mode="json"), status=201)


async def verdicts(request: web.Request) -> web.Response:
    admin_key(request)
    q = request.query
    try:
        # A time without a zone is UTC, as everywhere in the API.
        since = as_utc(datetime.fromisoformat(q["since"])) if q.get("since") else None
        limit = int(q.get("limit", "100"))
    except ValueError as exc:
        raise InvalidRequest(f"bad query: {exc}") from exc
    records = await request.app[GUARD_ADMIN].verdicts(
        since=since, policy=q.get("policy"), judge=q.get("judge"), outcome=q.get("outcome"),
        limit=max(1, min(limit, 10_000)),
    )
    return json_response({"data": [r.model_dump(mode="json") for r in records]})


async def judgment(request: web.Request) -> web.Response:
    """One judgment on demand (for `ctl guard eval`): the verdict and how long it took."""
    admin_key(request)
    _, payload = await read_json(request)
    try:
        req = JudgmentRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    turns = [Turn("user", req.text)] if req.direction == Direction.INPUT else [
        Turn("user", ""), Turn("assistant", req.text)]
    answer = await request.app[GUARD].ask(req.judge, req.direction, turns, req.budget_ms)
    return json_response({
        "judge": answer.judge,
        "outcome": answer.outcome.value,
        "verdict": answer.verdict.model_dump(mode="json") if answer.verdict else None,
        "error": answer.error or None,
        "latency_ms": round(answer.latency_ms, 1),
    })


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin/v1/guard", overview),
        web.post("/admin/v1/guard/switches", set_switches),
        web.get("/admin/v1/guard/policies", list_policies),
        web.get("/admin/v1/guard/policies/{name}", get_policy),
        web.put("/admin/v1/guard/policies/{name}", put_policy),
        web.delete("/admin/v1/guard/policies/{name}", delete_policy),
        web.get("/admin/v1/guard/judges", judges),
        web.post("/admin/v1/guard/judges", enable_judge),
        web.get("/admin/v1/guard/verdicts", verdicts),
        web.post("/admin/v1/guard/judgments", judgment),
    ]
