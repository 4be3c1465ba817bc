"""The data plane, `/v1/*`: OpenAI's chat completions and Responses, Anthropic's Messages."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from llmgw.api.appkeys import GATEWAY, GUARD, METRICS, METRICS_PEERS, METRICS_PUBLIC
from llmgw.api.body import read_body, read_json
from llmgw.api.context import REQUEST_ID, STARTED
from llmgw.api.endpoints import JSON, Access, Endpoint, Schema, obj, raw
from llmgw.api.errors import Handler, malformed_body, speaks_anthropic
from llmgw.api.handler import Head, answer, credentials
from llmgw.api.replies import write
from llmgw.core import tracing
from llmgw.core.errors import InvalidRequest
from llmgw.core.types import ApiKey, KeyScope
from llmgw.gateway.service import Gateway
from llmgw.gateway.traced import request_span
from llmgw.gateway.wire import anthropic_messages, checks
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.checks import MAX_TOKENS
from llmgw.gateway.wire.dialect import Api
from llmgw.guard import moderation

# Who may scrape a keyed `/metrics`.
SCRAPERS = frozenset({KeyScope.ADMIN, KeyScope.METRICS})


def client_key(request: web.Request) -> ApiKey:
    """The caller's key for the data plane (admin and user keys), from `Authorization: Bearer` or
    Anthropic's `x-api-key`."""
    return request.app[GATEWAY].authenticate(
        credentials(request.headers.get("Authorization"), request.headers.get("x-api-key")))


def _proxy(api: Api) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        gw = request.app[GATEWAY]
        if gw.tracer.enabled:
            return await _traced(request, gw, api)
        return await write(request, await answer(gw, _head(request, api), _body(request)))

    return handler


def _head(request: web.Request, api: Api) -> Head:
    headers = request.headers
    return Head(api, request.path, headers.get("Authorization"), headers.get("x-api-key"),
                speaks_anthropic(request.path, "anthropic-version" in headers),
                request.get(REQUEST_ID, ""), request.get(STARTED), headers.get("Cache-Control"),
                headers.get("X-Llmgw-Cache"), headers.get("X-Llmgw-Session"))


def _body(request: web.Request) -> Callable[[], Awaitable[bytes]]:
    """The body, read once the caller is known: bounded and within its deadline."""
    async def read() -> bytes:
        try:
            return await read_body(request)
        except web.RequestPayloadError as exc:
            raise malformed_body() from exc

    return read


async def _traced(request: web.Request, gw: Gateway, api: Api) -> web.StreamResponse:
    """The request under its span (the caller's `traceparent` its parent), current while the
    gateway works and the answer is written, so every span the request makes is its child."""
    span = request_span(gw.tracer, api, request.headers, request.host, request.path)
    with tracing.active(span):
        return await write(request, await answer(gw, _head(request, api), _body(request)))


async def list_models(request: web.Request) -> web.Response:
    """The models this key may use, in Anthropic's shape when the caller sends `anthropic-version`."""
    gw = request.app[GATEWAY]
    key = client_key(request)
    if "anthropic-version" in request.headers:
        body = anthropic_messages.models_body(gw.listed(key))
        return web.Response(body=body, content_type="application/json")
    data = [
        {
            "id": name,
            "object": "model",
            "created": int(created.timestamp()) if created else 0,
            "owned_by": "llmgw",
        }
        for name, created in gw.listed(key)
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
    """Prometheus text format, summed over the server's workers. It names every model and key
    prefix, so it takes an admin or metrics key unless the install made it public
    (`[server] metrics_public`)."""
    if not request.app[METRICS_PUBLIC]:
        request.app[GATEWAY].authenticate(request.headers.get("Authorization"), SCRAPERS)
    peers = request.app.get(METRICS_PEERS)
    others = await peers() if peers is not None else []
    await request.app[METRICS].refresh()
    return web.Response(body=request.app[METRICS].render(others),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def health(request: web.Request) -> web.Response:
    """Liveness for load balancers and scripts; says nothing about models, and says when the
    install's shared limit store does not answer (this process is up, its limits degraded)."""
    limiter = request.app[GATEWAY].limiter
    if limiter is not None and limiter.shared is not None and limiter.shared.degraded:
        how = "refused" if limiter.shared.closed else "admitted by this server's own counts"
        return web.json_response({"status": "ok", "limits": f"degraded: the shared limit store "
                                  f"does not answer; requests are {how}"})
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


# The OpenAI and Anthropic bodies: what llmgw checks before it forwards, nothing more (the rest
# passes through to the upstream, so no model is validated here: the hot path stays as it is).
_STR: Schema = {"type": "string"}
_TEXT_OR_ARRAY: Schema = {"oneOf": [_STR, {"type": "array"}]}
_TOKENS: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS}
_MESSAGE = obj(("role", "content"), role=_STR, content={"type": ["string", "array", "null"]})
_TURN = obj(("role", "content"), role={"enum": ["user", "assistant"]}, content={"type": ["string", "array"]})
_TURNS: Schema = {"type": "array", "minItems": 1, "items": _TURN}
_SSE = (JSON, "text/event-stream")


def _generation(required: tuple[str, ...], **props: Schema) -> Schema:
    """A chat or text completion body."""
    return obj(required, model=_STR, stream={"type": "boolean"}, max_tokens=_TOKENS,
               max_completion_tokens=_TOKENS, **props)


def _forward(name: str, summary: str, api: Api, body: Schema, **doc: Any) -> Endpoint[None, None]:
    spec = APIS[api]  # its path, and whose dialect its callers (and its errors) speak
    if spec.anthropic:
        doc["errors"] = "AnthropicError"
    return raw(name, "POST", spec.path, summary, "anthropic" if spec.anthropic else "openai",
               _proxy(api), body_schema=body, **doc)


HEALTH = raw("health", "GET", "/health", "Liveness", "meta", health, access=Access.PUBLIC,
             returns_schema=obj(("status",), status={"const": "ok"}))
METRICS_TEXT = raw("metrics", "GET", "/metrics", "Prometheus metrics (an admin or metrics key, unless "
                   "the install sets metrics_public)", "meta", metrics, access=Access.SCRAPER,
                   content=("text/plain",))
CHAT = _forward("chat_completions", "Chat completion", Api.CHAT,
                _generation(("model", "messages"),
                            messages={"type": "array", "minItems": 1, "items": _MESSAGE}),
                content=_SSE, example={"model": "gemma3-270m", "max_tokens": 32,
                                       "messages": [{"role": "user", "content": "Hello"}]},
                description="OpenAI's chat completions. The key's grants and limits are checked "
                "and the guard's policies applied, then the request goes to a ready replica of the "
                "model (or a route's target), translated when the upstream speaks Anthropic's "
                "dialect; `stream: true` answers in server-sent events. Fields llmgw does not "
                "check pass through to the upstream as they are.")
COMPLETIONS = _forward("completions", "Text completion", Api.COMPLETIONS,
                       _generation(("model", "prompt"), prompt=_TEXT_OR_ARRAY), content=_SSE,
                       description="OpenAI's text completions (a `prompt` rather than messages), "
                       "checked and forwarded as chat completions are; `stream: true` answers in "
                       "server-sent events.")
EMBEDDINGS = _forward("embeddings", "Embeddings", Api.EMBEDDINGS,
                      obj(("model", "input"), model=_STR, input=_TEXT_OR_ARRAY),
                      description="OpenAI's embeddings of `input`, from a replica of a model "
                      "whose engine serves them.")
RERANK = _forward("rerank", "Rerank documents (engines that serve it)", Api.RERANK,
                  obj(("model", "query", "documents"), model=_STR, query=_STR,
                      documents={"type": "array"}),
                  description="The `documents` scored by relevance to `query` (llama.cpp's rerank "
                  "API), from a replica of a model whose engine serves reranking.")
RESPONSES = _forward("responses", "OpenAI Responses (served from chat completions)",
                     Api.RESPONSES, obj(("model", "input"), model=_STR, input=_TEXT_OR_ARRAY,
                                        instructions={"type": ["string", "null"]},
                                        max_output_tokens=_TOKENS, stream={"type": "boolean"}),
                     content=_SSE, example={"model": "gemma3-270m", "input": "Hello"},
                     description="OpenAI's Responses API, carried over the upstream's chat "
                     "completions: the request is written as a chat completion, and the answer "
                     "(or its stream of `response.*` events) read back. Nothing is stored, so "
                     "every request carries its whole conversation; what cannot be carried "
                     "(`previous_response_id`, hosted tools, ...) is refused with a 400 naming "
                     "the field.")
MESSAGES = _forward("messages", "Anthropic Messages", Api.MESSAGES,
                    obj(("model", "messages", "max_tokens"), model=_STR, messages=_TURNS,
                        max_tokens=_TOKENS, stream={"type": "boolean"},
                        system={"type": ["string", "array"]}),
                    content=_SSE,
                    example={"model": "gemma3-270m", "max_tokens": 32,
                             "messages": [{"role": "user", "content": "Hello"}]},
                    description="Anthropic's Messages API, answered in Anthropic's shape (its "
                    "errors too), with the key as `x-api-key` or `Authorization: Bearer`. A model "
                    "whose upstream speaks OpenAI's dialect gets the request as a chat completion "
                    "and its answer (or stream) back as Anthropic's.")
COUNT_TOKENS = _forward("count_tokens", "Anthropic token count",
                        Api.COUNT_TOKENS, obj(("model", "messages"), model=_STR, messages=_TURNS),
                        returns_schema=obj(("input_tokens",), input_tokens={"type": "integer"}),
                        description="The input tokens a Messages request would take: the "
                        "upstream's count when it speaks Anthropic's dialect, else an estimate. "
                        "It counts as a request against the key's limits, with no tokens.")
MODELS = raw("openai_models", "GET", "/v1/models", "Models this key may use", "openai", list_models,
             returns_schema=obj(("object", "data"), object={"const": "list"}, data={
                 "type": "array",
                 "items": obj(("id", "object", "created", "owned_by"), id=_STR,
                              object={"const": "model"}, created={"type": "integer"}, owned_by=_STR),
             }))
MODERATIONS = raw("moderations", "POST", "/v1/moderations", "Moderation by the guard's judges",
                  "openai", moderations,
                  body_schema=obj(("input",), model=_STR, input={"oneOf": [
                      _STR, {"type": "array", "minItems": 1, "items": _STR}]}))

ENDPOINTS: list[Endpoint[Any, Any]] = [
    HEALTH, METRICS_TEXT, CHAT, COMPLETIONS, EMBEDDINGS, RERANK, RESPONSES, MESSAGES, COUNT_TOKENS,
    MODELS, MODERATIONS,
]
