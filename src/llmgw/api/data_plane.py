"""The OpenAI-compatible data plane: `/v1/*`."""

from __future__ import annotations

import secrets
from typing import Any

import orjson
from aiohttp import web

from llmgw.api.appkeys import GATEWAY, GUARD, METRICS, METRICS_PUBLIC
from llmgw.api.body import optional_positive_int, read_json, require
from llmgw.api.openapi import openapi_json
from llmgw.core.errors import InvalidRequest
from llmgw.core.types import ApiKey, KeyScope
from llmgw.guard import moderation

# Who may scrape a keyed `/metrics`.
SCRAPERS = frozenset({KeyScope.ADMIN, KeyScope.METRICS})

# Far above any context window llmgw serves; a larger value is a client bug, not a request.
MAX_TOKENS = 1_000_000


def _check_chat(payload: dict[str, Any]) -> None:
    require(payload, "model", str, "a string")
    require(payload, "messages", list, "an array of messages")
    if not payload["messages"]:
        raise InvalidRequest("'messages' must contain at least one message", param="messages")


def _check_completion(payload: dict[str, Any]) -> None:
    require(payload, "model", str, "a string")
    require(payload, "prompt", (str, list), "a string or an array")


def _check_embedding(payload: dict[str, Any]) -> None:
    require(payload, "model", str, "a string")
    require(payload, "input", (str, list), "a string or an array")


def client_key(request: web.Request) -> ApiKey:
    """The caller's key for the data plane (admin and user keys)."""
    return request.app[GATEWAY].authenticate(request.headers.get("Authorization"))


def _proxy(path: str, check: Any) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        gw = request.app[GATEWAY]
        key = client_key(request)
        body, payload = await read_json(request)
        check(payload)
        if "stream" in payload and not isinstance(payload["stream"], bool):
            raise InvalidRequest("'stream' must be a boolean", param="stream")
        for field in ("max_tokens", "max_completion_tokens"):
            optional_positive_int(payload, field, MAX_TOKENS)
        return await gw.forward(request, key, path, body, payload)

    return handler


async def list_models(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    key = client_key(request)
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
    require(payload, "input", (str, list), "a string or an array of strings")
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
        web.post("/v1/chat/completions", _proxy("/chat/completions", _check_chat)),
        web.post("/v1/completions", _proxy("/completions", _check_completion)),
        web.post("/v1/embeddings", _proxy("/embeddings", _check_embedding)),
        web.get("/v1/models", list_models),
        web.post("/v1/moderations", moderations),
    ]
