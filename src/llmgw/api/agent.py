"""The agent API: `/agent/v1/*`, for node agents holding a join token."""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.admin import invalid
from llmgw.api.appkeys import AGENTS, CHANGES, GATEWAY
from llmgw.api.body import json_response, read_json
from llmgw.core.agent_wire import Changes, SyncRequest
from llmgw.core.errors import InvalidRequest
from llmgw.core.types import KeyScope

AGENTS_SCOPES = frozenset({KeyScope.NODE})
# The longest a changes call is held open: well inside the agents' own request timeout and any
# proxy's idle timeout.
MAX_WAIT_S = 30.0


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


async def changes(request: web.Request) -> web.Response:
    """Answer once this server's view of the store is past `since` (a placement, a stop, any
    change), or after `wait` seconds: the agent then syncs at once instead of at its next round."""
    request.app[GATEWAY].authenticate(request.headers.get("Authorization"), AGENTS_SCOPES)
    try:
        since = int(request.query.get("since", "-1"))
    except ValueError:
        raise InvalidRequest("since must be an integer revision", param="since") from None
    try:
        wait = float(request.query.get("wait", "0"))
    except ValueError:
        raise InvalidRequest("wait must be a number of seconds", param="wait") from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise InvalidRequest(f"wait must be between 0 and {MAX_WAIT_S:g} seconds", param="wait")
    revision = await request.app[CHANGES](since, wait)
    return json_response(Changes(revision=revision).model_dump(mode="json"))


def routes() -> list[web.RouteDef]:
    return [web.post("/agent/v1/sync", sync), web.get("/agent/v1/changes", changes)]
