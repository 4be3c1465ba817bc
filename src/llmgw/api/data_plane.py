"""The data plane, `/v1/*`: OpenAI's chat completions and Responses, Anthropic's Messages."""

from __future__ import annotations

import secrets

import orjson
from aiohttp import web

from llmgw.api.appkeys import GATEWAY, GUARD, METRICS, METRICS_PUBLIC
from llmgw.api.body import read_json
from llmgw.api.context import REQUEST_ID, STARTED
from llmgw.api.errors import Handler
from llmgw.api.openapi import openapi_json
from llmgw.api.replies import write
from llmgw.core.errors import InvalidRequest
from llmgw.core.types import ApiKey, KeyScope
from llmgw.gateway.wire import anthropic_messages, checks
from llmgw.gateway.wire.dialect import Api
from llmgw.guard import moderation

# Who may scrape a keyed `/metrics`.
SCRAPERS = frozenset({KeyScope.ADMIN, KeyScope.METRICS})


def client_key(request: web.Request) -> ApiKey:
    """The caller's key for the data plane (admin and user keys), from `Authorization: Bearer` or
    Anthropic's `x-api-key`."""
    authorization = request.headers.get("Authorization")
    if authorization is None and (api_key := request.headers.get("x-api-key")) is not None:
        authorization = "Bearer " + api_key
    return request.app[GATEWAY].authenticate(authorization)


def _proxy(api: Api) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        gw = request.app[GATEWAY]
        key = client_key(request)
        body, payload = await read_json(request)
        reply = await gw.forward(key, api, body, payload, request.get(REQUEST_ID, ""), request.get(STARTED))
        return await write(request, reply)

    return handler


async def list_models(request: web.Request) -> web.Response:
    """The models this key may use, in Anthropic's shape when the caller sends `anthropic-version`."""
    gw = request.app[GATEWAY]
    key = client_key(request)
    if "anthropic-version" in request.headers:
        body = anthropic_messages.models_body([(m.name, m.created_at) for m in gw.models(key)])
        return web.Response(body=body, content_type="application/json")
    data = [
        {
            "id": m.name,
            "object": "model",
            "created": int(m.created_at.timestamp()) if m.created_at else 0,
            "owned_by": "llmgw",
        }
        for m in gw.models(key)
    ]
    return web.Response(
        body=orjson.dumps({"object": "list", "data": data}), content_type="application/json"
    )


async def moderations(request: web.Request) -> web.Response:
    """OpenAI's moderation endpoint, answered by the judges of the key's guard policies."""
    key = client_key(request)
    _, payload = await read_json(request)
    checks.required(payload, "input", (str, list), "a string or an array of strings")
    if "model" in payload and not isinstance(payload["model"], str):
        raise InvalidRequest("'model' must be a string", param="model")
    texts = [payload["input"]] if isinstance(payload["input"], str) else payload["input"]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidRequest("'input' must be a string or a non-empty array of strings", param="input")
    guard = request.app[GUARD]
    judges, budget_ms = guard.moderation_judges(key.name)
    results = [moderation.result(await guard.moderate(judges, t, budget_ms)) for t in texts]
    body = {"id": "modr-" + secrets.token_hex(12), "model": ",".join(judges), "results": results}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format. It names every model and key prefix, so it takes an admin or
    metrics key unless the install made it public (`[server] metrics_public`)."""
    if not request.app[METRICS_PUBLIC]:
        request.app[GATEWAY].authenticate(request.headers.get("Authorization"), SCRAPERS)
    return web.Response(body=request.app[METRICS].render(),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def health(_request: web.Request) -> web.Response:
    """Liveness for load balancers and scripts; says nothing about models."""
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


def routes() -> list[web.RouteDef]:
    """The data-plane routes."""
    return [
        web.get("/health", health),
        web.get("/metrics", metrics),
        web.get("/openapi.json", openapi_json),
        web.post("/v1/chat/completions", _proxy(Api.CHAT)),
        web.post("/v1/completions", _proxy(Api.COMPLETIONS)),
        web.post("/v1/embeddings", _proxy(Api.EMBEDDINGS)),
        web.post("/v1/rerank", _proxy(Api.RERANK)),
        web.post("/v1/responses", _proxy(Api.RESPONSES)),
        web.post("/v1/messages", _proxy(Api.MESSAGES)),
        web.post("/v1/messages/count_tokens", _proxy(Api.COUNT_TOKENS)),
        web.get("/v1/models", list_models),
        web.post("/v1/moderations", moderations),
    ]
