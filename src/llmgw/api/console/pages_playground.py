"""The playground: chat with one of the key's models through the gateway itself, streamed, and
(admin keys) the guard's verdicts on that request. A signed-in person sends as the gateway's
`sender` says (a team admin as its team, an admin or operator within the install's playground
limits; a viewer is refused), never with their admin API acting key."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from llmgw.api.admin.guard import LIST_VERDICTS
from llmgw.api.appkeys import GATEWAY
from llmgw.api.body import read_json
from llmgw.api.console import data, render
from llmgw.api.console.access import root, visitor
from llmgw.api.context import REQUEST_ID, STARTED
from llmgw.api.replies import write
from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire.dialect import Api

ROLES = ("system", "user", "assistant")
# One request's verdicts: input and output windows of each policy; more would be a page of noise.
MAX_VERDICTS = 100
# A try-out: one click may not cost more than this many tokens of answer; it asks for this few
# unless told otherwise.
MAX_TOKENS = 512
DEFAULT_MAX_TOKENS = 64
MAX_MESSAGES = 100


async def playground(request: web.Request) -> web.Response:
    """The form: the models and routes the visitor may send to (a model that answers now chosen
    first), the answer's length, a prompt, the answer as it streams in."""
    gateway = root(request)[GATEWAY]
    key = gateway.sender(visitor(request).caller)
    callable_models = gateway.models(key)
    models = [m.name for m in callable_models if not m.guard]
    every = {m.name for m in callable_models}
    routes = [name for name, _ in gateway.listed(key) if name not in every]
    ready = {name for name in models if gateway.answering(name)}
    chosen = next((name for name in models if name in ready), models[0] if models else None)
    return render.page(request, "playground.html", models=models, routes=routes, ready=ready,
                       chosen=chosen, max_tokens=DEFAULT_MAX_TOKENS, max_tokens_cap=MAX_TOKENS)


def _messages(payload: dict[str, Any]) -> tuple[str, list[dict[str, str]]]:
    model, messages = payload.get("model"), payload.get("messages")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("Pick a model.", param="model")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("Write a message first.", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise InvalidRequest(f"At most {MAX_MESSAGES} messages.", param="messages")
    out = []
    for m in messages:
        if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
            raise InvalidRequest("Each message needs a role and a text.", param="messages")
        out.append({"role": m["role"], "content": m["content"]})
    if not out[-1]["content"].strip():
        raise InvalidRequest("Write a message first.", param="messages")
    return model, out


def _max_tokens(payload: dict[str, Any]) -> int:
    value = payload.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise InvalidRequest(f"Max tokens must be a whole number from 1 to {MAX_TOKENS}.",
                             param="max_tokens")
    return value


async def chat(request: web.Request) -> web.StreamResponse:
    """`{model, messages, max_tokens}` in (a model or a route), the gateway's SSE stream of chat
    completion chunks out: the same path (auth, limits, guard, usage) as `/v1/chat/completions`
    with the key the gateway's `sender` gives the visitor."""
    _, payload = await read_json(request)
    model, messages = _messages(payload)
    upstream = {"model": model, "messages": messages, "stream": True,
                "max_tokens": _max_tokens(payload),
                "stream_options": {"include_usage": True}}
    gateway = root(request)[GATEWAY]
    reply = await gateway.forward(
        gateway.sender(visitor(request).caller), Api.CHAT, orjson.dumps(upstream), upstream,
        request.get(REQUEST_ID, ""), request.get(STARTED))
    return await write(request, reply)


async def verdicts(request: web.Request) -> web.Response:
    """The verdict log's entries for one request (admin keys): a fragment the page polls until
    the flushed verdicts appear."""
    request_id = request.query.get("request_id", "")
    rows = []
    if request_id:  # without one, "no filter" would list everyone's verdicts
        found = await data.call(root(request), visitor(request).caller, LIST_VERDICTS,
                                query={"request_id": request_id, "limit": str(MAX_VERDICTS)})
        rows = found["data"]
    return render.page(request, "verdict_rows.html", verdicts=rows, empty="No verdicts yet.")
