"""The OpenAPI 3.1 description of llmgw's HTTP API (data plane and admin), at `/openapi.json`.

Admin request bodies come from the pydantic models the handlers validate with, so the document
cannot drift from what the server accepts; the OpenAI bodies are described minimally (the fields
llmgw itself checks), everything else passes through to the upstream.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from llmgw import __version__
from llmgw.control.node_admin import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, MAX_LABELS
from llmgw.core.agent_wire import Changes, SyncRequest
from llmgw.core.guard import JudgeSpec, Outcome, Policy
from llmgw.core.names import MODEL_NAME_MAX
from llmgw.core.protocol import (
    EnableJudge,
    JudgmentRequest,
    KeyRequest,
    LabelRequest,
    ScaleRequest,
    ServeRequest,
    SwitchRequest,
)
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import _REPO_RE, NAME_PATTERN, Limits, Model
from llmgw.gateway.wire.checks import MAX_TOKENS

JSON = "application/json"
_MODELS: tuple[type[BaseModel], ...] = (
    Model, Policy, ServeRequest, KeyRequest, Limits, ScaleRequest, SwitchRequest, EnableJudge,
    JudgmentRequest, JudgeSpec, LabelRequest, SyncRequest, Changes,
)
_PARAM = re.compile(r"{(\w+)}")

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: tuple[str, ...] = (), **props: Schema) -> Schema:
    """An object with these properties; others are allowed."""
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


def _list_of(item: Schema) -> Schema:
    return _obj(("data",), data={"type": "array", "items": item})


_STR: Schema = {"type": "string"}
_OPEN: Schema = {"type": "object"}
_TEXT_OR_ARRAY: Schema = {"oneOf": [_STR, {"type": "array"}]}

_ERROR: Schema = {
    "type": "object",
    "description": "Every error, in OpenAI's shape.",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "additionalProperties": False,
            "properties": {
                "message": _STR,
                "type": _STR,
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

# The OpenAI bodies: what llmgw checks before it forwards, nothing more.
_MESSAGE = _obj(("role", "content"), role=_STR, content={"type": ["string", "array", "null"]})
_TURN = _obj(("role", "content"), role={"enum": ["user", "assistant"]},
             content={"type": ["string", "array"]})
_RERANK = _obj(("model", "query", "documents"), model=_STR, query=_STR,
               documents={"type": "array"})
_ANTHROPIC_ERROR: Schema = {
    "type": "object",
    "description": "Every error on Anthropic's paths, in Anthropic's shape.",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": _obj(("type", "message"), type=_STR, message=_STR),
    },
}
_EMBEDDING = _obj(("model", "input"), model=_STR, input=_TEXT_OR_ARRAY)
_MODERATION = _obj(("input",), input={"oneOf": [
    _STR, {"type": "array", "minItems": 1, "items": _STR}]}, model=_STR)
_OPENAI_MODELS = _obj(("object", "data"), object={"const": "list"}, data={
    "type": "array",
    "items": _obj(("id", "object", "created", "owned_by"), id=_STR, object={"const": "model"},
                  created={"type": "integer"}, owned_by=_STR),
})
_HUB = {"kind": "hf", "repo": "unsloth/gemma-3-270m-it-GGUF", "file": "gemma-3-270m-it-Q4_K_M.gguf"}
_EXAMPLES: dict[str, Schema] = {
    "chat": {"model": "gemma3-270m", "messages": [{"role": "user", "content": "Hello"}],
             "max_tokens": 32},
    "model": {"name": "gemma3-270m", "source": _HUB, "scaling": {"min": 0, "max": 1},
              "profiles": [{"name": "cpu", "cpu_cores": 2, "min_memory_gb": 1}]},
    "job": {"name": "gemma3-270m", "source": _HUB, "cores": 2, "ctx_size": DEFAULT_CTX_SIZE},
}
_REMOVED = _obj(("name", "removed"), name=_STR, removed={"type": "boolean"})
_NODE = _obj(("id", "status", "labels", "cordoned", "draining", "replica_count"), id=_STR,
             status={"type": "string", "enum": ["ready", "cordoned", "draining", "lost"]},
             labels={"type": "object", "additionalProperties": _STR},
             cordoned={"type": "boolean"}, draining={"type": "boolean"},
             heartbeat_age_s={"type": ["number", "null"]}, replica_count={"type": "integer"})
_NODE_DETAIL = {**_NODE, "required": [*_NODE["required"], "replicas"],
                "properties": {**_NODE["properties"], "replicas": {"type": "array"}}}


def _generation(required: tuple[str, ...], **props: Schema) -> Schema:
    """A chat or text completion body."""
    tokens = {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS}
    return _obj(required, model=_STR, stream={"type": "boolean"}, max_tokens=tokens,
                max_completion_tokens=tokens, **props)


def _components() -> Schema:
    """The pydantic models' schemas and their definitions, under components/schemas."""
    pairs: list[tuple[type[BaseModel], Literal["validation"]]] = [(m, "validation") for m in _MODELS]
    _, top = models_json_schema(pairs, ref_template="#/components/schemas/{model}")
    schemas: Schema = dict(top["$defs"])
    # Checked by a validator the JSON schema cannot show.
    for named in ("Model", "ServeRequest"):
        schemas[named]["properties"]["name"] |= {"pattern": NAME_PATTERN,
                                                 "maxLength": MODEL_NAME_MAX}
    schemas["HubSource"]["properties"]["repo"]["pattern"] = _REPO_RE.pattern
    schemas["RemoteSource"]["properties"]["base_url"]["pattern"] = "^https?://"
    # `kind` has a default, but the discriminated union needs it on the wire.
    for source in ("LocalSource", "HubSource", "RemoteSource"):
        schemas[source]["required"] = ["kind", *schemas[source].get("required", [])]
    # PUT /admin/v1/guard/policies/{name} takes the name from the path.
    body = {**schemas["Policy"], "title": "PolicyBody"}
    body["required"] = [r for r in body["required"] if r != "name"]
    body["properties"] = {**body["properties"], "judges": {
        **body["properties"]["judges"], "examples": [["qwen3guard-0.6b"]]}}
    schemas["PolicyBody"] = body
    # NodeAdmin checks the label rules; the document shows them.
    labels = schemas["LabelRequest"]["properties"]
    labels["set"] |= {"propertyNames": {"pattern": LABEL_KEY_PATTERN}, "maxProperties": MAX_LABELS,
                      "additionalProperties": {"type": "string", "pattern": LABEL_VALUE_PATTERN}}
    labels["remove"] |= {"maxItems": MAX_LABELS}
    schemas["Error"] = _ERROR
    schemas["AnthropicError"] = _ANTHROPIC_ERROR
    return {
        "schemas": schemas,
        "responses": {
            "Error": {"description": "An error in OpenAI's shape.",
                      "content": {JSON: {"schema": _ref("Error")}}},
            "AnthropicError": {"description": "An error in Anthropic's shape (the Messages API).",
                               "content": {JSON: {"schema": _ref("AnthropicError")}}},
        },
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "An llmgw API key: `Authorization: Bearer sk-llmgw-...`."},
            "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key",
                          "description": "The same key as Anthropic's clients send it."},
        },
    }


def _op(
    summary: str,
    tag: str,
    *,
    body: Schema | None = None,
    status: int = 200,
    returns: Schema | None = None,
    content: tuple[str, ...] = (JSON,),
    query: dict[str, Schema] | None = None,
    public: bool = False,
    example: Schema | None = None,
    errors: str = "Error",
) -> Schema:
    op: Schema = {
        "summary": summary,
        "tags": [tag],
        "responses": {
            str(status): {
                "description": summary,
                "content": {ct: {"schema": returns or _OPEN} if ct == JSON else {"schema": _STR}
                            for ct in content},
            },
            "4XX": {"$ref": f"#/components/responses/{errors}"},
            "5XX": {"$ref": f"#/components/responses/{errors}"},
        },
    }
    if body is not None:
        media: Schema = {"schema": body} | ({"example": example} if example else {})
        op["requestBody"] = {"required": True, "content": {JSON: media}}
    if query:
        op["parameters"] = [{"name": n, "in": "query", "required": False, "schema": s}
                            for n, s in query.items()]
    if public:
        op["security"] = []
    return op


def _paths() -> dict[str, dict[str, Schema]]:
    v1, adm, guard, keys = "openai", "admin", "guard", "keys"
    model = _ref("Model")
    policy = _ref("Policy")
    chat = _generation(("model", "messages"),
                       messages={"type": "array", "minItems": 1, "items": _MESSAGE})
    completion = _generation(("model", "prompt"), prompt=_TEXT_OR_ARRAY)
    tokens = {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS}
    turns = {"type": "array", "minItems": 1, "items": _TURN}
    messages = _obj(("model", "messages", "max_tokens"), model=_STR, messages=turns,
                    max_tokens=tokens, stream={"type": "boolean"},
                    system={"type": ["string", "array"]})
    counted = _obj(("model", "messages"), model=_STR, messages=turns)
    responses = _obj(("model", "input"), model=_STR, input=_TEXT_OR_ARRAY,
                     instructions={"type": ["string", "null"]}, max_output_tokens=tokens,
                     stream={"type": "boolean"})
    sse = (JSON, "text/event-stream")
    return {
        "/health": {"get": _op("Liveness", "meta", public=True,
                               returns=_obj(("status",), status={"const": "ok"}))},
        "/metrics": {"get": _op("Prometheus metrics (an admin or metrics key, unless the install "
                                "sets metrics_public)", "meta", content=("text/plain",))},
        "/openapi.json": {"get": _op("This document", "meta", public=True)},
        "/v1/chat/completions": {"post": _op("Chat completion", v1, body=chat, example=_EXAMPLES["chat"],
                                             content=(JSON, "text/event-stream"))},
        "/v1/completions": {"post": _op("Text completion", v1, body=completion,
                                        content=(JSON, "text/event-stream"))},
        "/v1/embeddings": {"post": _op("Embeddings", v1, body=_EMBEDDING)},
        "/v1/rerank": {"post": _op("Rerank documents (engines that serve it)", v1, body=_RERANK)},
        "/v1/responses": {"post": _op("OpenAI Responses (served from chat completions)", v1,
                                      body=responses, content=sse,
                                      example={"model": "gemma3-270m", "input": "Hello"})},
        "/v1/messages": {"post": _op("Anthropic Messages", "anthropic", body=messages, content=sse,
                                     errors="AnthropicError",
                                     example={"model": "gemma3-270m", "max_tokens": 32,
                                              "messages": [{"role": "user", "content": "Hello"}]})},
        "/v1/messages/count_tokens": {"post": _op("Anthropic token count", "anthropic", body=counted,
                                                  errors="AnthropicError",
                                                  returns=_obj(("input_tokens",),
                                                               input_tokens={"type": "integer"}))},
        "/v1/models": {"get": _op("Models this key may use", v1, returns=_OPENAI_MODELS)},
        "/v1/moderations": {"post": _op("Moderation by the guard's judges", v1, body=_MODERATION)},
        "/admin/v1/models": {
            "get": _op("List catalog models with each one's on-demand state", adm,
                       returns=_list_of({"allOf": [model, _obj(state={
                           "type": "string",
                           "description": "cold, pending, loading on NODE, ready, idle 3m, "
                                          "failed or remote"})]})),
            "post": _op("Add a catalog model", adm, body=model, status=201, returns=model,
                        example=_EXAMPLES["model"]),
        },
        "/admin/v1/models/{name}": {
            "get": _op("Show a catalog model", adm, returns=model),
            "delete": _op("Remove a catalog model", adm, returns=_REMOVED),
        },
        "/admin/v1/models/{name}/resources": {"get": _op("Placement and memory estimates", adm)},
        "/admin/v1/models/{name}/scale": {
            "post": _op("Scale a model (min 0 and idle_s: on demand, stopped when idle)", adm,
                        body=_ref("ScaleRequest"), returns=model,
                        example={"min": 0, "max": 2, "idle_s": 600})},
        "/admin/v1/replicas": {"get": _op("List replicas", adm, returns=_list_of(_OPEN),
                                          query={"model": _STR})},
        "/admin/v1/nodes": {"get": _op("List nodes with their status", adm, returns=_list_of(_NODE))},
        "/admin/v1/nodes/{id}": {
            "get": _op("Show a node and its replicas", adm, returns=_NODE_DETAIL),
            "delete": _op("Remove a node (refused while it runs replicas, unless force)", adm,
                          query={"force": {"type": "boolean"}},
                          returns=_obj(("id", "removed"), id=_STR, removed={"type": "boolean"})),
        },
        "/admin/v1/nodes/{id}/labels": {
            "post": _op("Set and remove node labels", adm, body=_ref("LabelRequest"), returns=_NODE,
                        example={"set": {"zone": "eu-1"}, "remove": ["old"]})},
        "/admin/v1/nodes/{id}/cordon": {"post": _op("Cordon a node: no new replicas", adm,
                                                    returns=_NODE)},
        "/admin/v1/nodes/{id}/uncordon": {"post": _op("Uncordon a node (ends a drain)", adm,
                                                      returns=_NODE)},
        "/admin/v1/nodes/{id}/drain": {"post": _op("Drain a node: its replicas move elsewhere",
                                                   adm, returns=_NODE)},
        "/admin/v1/cluster": {"get": _op("This server, the leader and its lease", adm)},
        "/agent/v1/sync": {"post": _op("A node agent's heartbeat, reports and assignments",
                                       "agent", body=_ref("SyncRequest"))},
        "/agent/v1/changes": {"get": _op(
            "Held until this server's view of the store is past `since` (or `wait` seconds, at "
            "most 30, pass); answers the revision then", "agent", returns=_ref("Changes"),
            query={"since": {"type": "integer"},
                   "wait": {"type": "number", "minimum": 0, "maximum": 30}})},
        "/admin/v1/jobs": {
            "get": _op("List serve jobs", adm, returns=_list_of(_OPEN)),
            "post": _op("Start a serve job", adm, body=_ref("ServeRequest"), status=201,
                        example=_EXAMPLES["job"]),
        },
        "/admin/v1/jobs/{id}": {"get": _op("Show a serve job", adm)},
        "/admin/v1/jobs/{id}/cancel": {"post": _op("Cancel a serve job", adm)},
        "/admin/v1/guard": {"get": _op("Guard switches and policies", guard)},
        "/admin/v1/guard/switches": {
            "post": _op("Set guard switches", guard, body=_ref("SwitchRequest"))},
        "/admin/v1/guard/policies": {"get": _op("List policies", guard, returns=_list_of(policy))},
        "/admin/v1/guard/policies/{name}": {
            "get": _op("Show a policy", guard, returns=policy),
            "put": _op("Create or replace a policy", guard, body=_ref("PolicyBody"), returns=policy),
            "delete": _op("Remove a policy", guard, returns=_REMOVED),
        },
        "/admin/v1/guard/judges": {
            "get": _op("Judge status", guard, returns=_list_of(_OPEN)),
            "post": _op("Enable a judge", guard, body=_ref("EnableJudge"), status=201,
                        returns=_ref("JudgeSpec")),
        },
        "/admin/v1/guard/verdicts": {"get": _op("The verdict log", guard, returns=_list_of(_OPEN), query={
            "since": {"type": "string", "format": "date-time"}, "policy": _STR, "judge": _STR,
            "outcome": {"type": "string", "enum": [o.value for o in Outcome]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10_000},
        })},
        "/admin/v1/guard/judgments": {
            "post": _op("One judgment on demand", guard, body=_ref("JudgmentRequest"))},
        "/admin/v1/keys": {
            "get": _op("List keys", keys, returns=_list_of(_OPEN)),
            "post": _op("Create a key (shown once)", keys, body=_ref("KeyRequest"), status=201),
        },
        "/admin/v1/keys/{id}": {"get": _op("Show a key", keys)},
        "/admin/v1/keys/{id}/revoke": {"post": _op("Revoke a key", keys)},
        "/admin/v1/keys/{id}/rotate": {"post": _op("Rotate a key (shown once)", keys, status=201)},
        "/admin/v1/limits/default": {
            "get": _op("Default limits", keys, returns=_ref("Limits")),
            "put": _op("Set default limits", keys, body=_ref("Limits"), returns=_ref("Limits")),
        },
        "/admin/v1/usage": {"get": _op("Usage per key, model and day", keys, returns=_list_of(_OPEN),
                                       query={"key": _STR, "model": _STR,
                                              "since": {"type": "string", "format": "date"}})},
    }


def _with_path_parameters(paths: dict[str, dict[str, Schema]]) -> dict[str, Schema]:
    """Each templated path declares its parameters once, for all its methods."""
    policy_name = Policy.model_json_schema()["properties"]["name"]["pattern"]
    out: dict[str, Schema] = {}
    for path, ops in paths.items():
        pattern = policy_name if path.startswith("/admin/v1/guard/") else NAME_PATTERN
        params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}
                   | ({"pattern": pattern} if n == "name" else {})} for n in _PARAM.findall(path)]
        out[path] = {**ops, "parameters": params} if params else dict(ops)
    return out


def spec() -> dict[str, Any]:
    """llmgw's OpenAPI 3.1 document: a fresh copy, the caller's to change."""
    result: dict[str, Any] = orjson.loads(_encoded())
    return result


@functools.cache
def _encoded() -> bytes:
    return orjson.dumps(_build())


def _build() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "llmgw",
            "version": __version__,
            "description": "A self-hosted LLM gateway: OpenAI-compatible data plane (`/v1`) and "
                           "admin API (`/admin/v1`). Every error is "
                           '`{"error": {"message", "type", "param", "code"}}`.',
        },
        "security": [{"bearer": []}],
        "tags": [{"name": t} for t in ("meta", "openai", "admin", "guard", "keys")],
        "paths": _with_path_parameters(_paths()),
        "components": _components(),
    }


async def openapi_json(_request: web.Request) -> web.Response:
    """The document, built once; no key needed (it holds no secrets)."""
    return web.Response(body=_encoded(), content_type=JSON)
