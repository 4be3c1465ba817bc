"""The agent API: `/agent/v1/*`, for node agents holding a join token."""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.admin import invalid
from llmgw.api.appkeys import AGENTS, GATEWAY
from llmgw.api.body import json_response, read_json
from llmgw.core.agent_wire import SyncRequest
from llmgw.core.types import KeyScope

AGENTS_SCOPES = frozenset({KeyScope.NODE})


async def sync(request: web.Request) -> web.Response:
    # Join tokens only, not admin keys: a token is bound to its node, and an admin key on a
    # node's command line would grant far more than reporting as one machine.
    key = request.app[GATEWAY].authenticate(request.headers.get("Authorization"), AGENTS_SCOPES)
    _, payload = await read_json(request)
    try:
        req = SyncRequest.model_validate(payload)
    except ValidationError as exc:
        raise invalid(exc) from exc
    answer = await request.app[AGENTS].sync(req, key)
    return json_response(answer.model_dump(mode="json"))


def routes() -> list[web.RouteDef]:
    return [web.post("/agent/v1/sync", sync)]
