"""The OpenAPI 3.1 description of llmgw's HTTP API (data plane and admin), at `/openapi.json`.

Generated from the endpoint declarations: bodies, answers and query parameters come from the
models the handlers validate with and answer, so the document cannot drift from what the server
does; the OpenAI bodies are described by hand, minimally (the fields llmgw itself checks),
everything else passes through to the upstream.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from llmgw import __version__
from llmgw.api.endpoints import JSON, Access, Endpoint, Schema, raw
from llmgw.control.node_admin import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, MAX_LABELS
from llmgw.core.guard import Policy
from llmgw.core.names import MODEL_NAME_MAX
from llmgw.core.types import _REPO_RE, NAME_PATTERN

_PARAM = re.compile(r"{(\w+)(?::[^}]*)?}")
_COMPONENTS = "#/components/schemas/"
Mode = Literal["validation", "serialization"]

ERROR: Schema = {
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
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
ANTHROPIC_ERROR: Schema = {
    "type": "object",
    "description": "Every error on Anthropic's paths, in Anthropic's shape.",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {"type": "object", "required": ["type", "message"],
                  "properties": {"type": {"type": "string"}, "message": {"type": "string"}}},
    },
}
JSONRPC_ERROR: Schema = {
    "type": "object",
    "description": "Every error on `/mcp`, in JSON-RPC's shape (MCP's).",
    "required": ["jsonrpc", "id", "error"],
    "additionalProperties": False,
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "error": {"type": "object", "required": ["code", "message"],
                  "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}},
    },
}
# What each endpoint's tag groups, for the document's readers (and the reference made of it).
TAGS = {
    "meta": "Liveness, metrics and this document.",
    "openai": "The data plane in OpenAI's dialect: what OpenAI's clients and SDKs call.",
    "anthropic": "The data plane in Anthropic's dialect: what Anthropic's clients and SDKs call; "
                 "errors in Anthropic's shape.",
    "admin": "The catalog, replicas, serve jobs, nodes, the cluster and the audit log: what "
             "`llmgw ctl` and the console call.",
    "guard": "Guard switches, policies, judges and the verdict log.",
    "keys": "API keys, default limits and usage. A user key sees only itself and the keys "
            "minted beneath it (a team admin key, its team's too).",
    "agent": "What node agents (`llmgw node run`) call with their join tokens.",
    "routes": "Routes: one name in front of several catalog models.",
    "teams": "Teams: keys with shared limits and budgets.",
    "cache": "The response cache: hits and saved tokens per model, purging it, a model's own "
             "setting (a route's is part of the route).",
    "users": "People who sign in to the console through the identity provider (`[sso]`): their "
             "roles and sessions. Admins only.",
    "mcp": "MCP (agents' tools): the `/mcp` endpoint MCP clients connect to (errors there are "
           "JSON-RPC's shape), the upstream MCP servers behind it and the tool calls made to them "
           "(admins only; no answer holds a credential, only where it is read).",
}
# PUT /admin/v1/guard/policies/{name} takes the policy's name from the path.
POLICY_BODY: Schema = {"$ref": f"{_COMPONENTS}PolicyBody"}


def openapi_path(path: str) -> str:
    """An aiohttp path as OpenAPI writes it: `{name:.+}` is `{name}`."""
    return _PARAM.sub(r"{\1}", path)


def document(endpoints: Sequence[Endpoint[Any, Any]]) -> dict[str, Any]:
    """llmgw's OpenAPI 3.1 document for `endpoints`."""
    refs, schemas = _schemas(endpoints)
    paths: dict[str, Schema] = {}
    for ep in endpoints:
        paths.setdefault(openapi_path(ep.path), {})[ep.method.lower()] = _operation(ep, refs, schemas)
    for ep in endpoints:  # query models are shown as parameters, not as schemas
        if ep.query is not None:
            schemas.pop(_name(refs[(ep.query, "validation")]), None)
    tags = list(dict.fromkeys(ep.tag for ep in endpoints))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "llmgw",
            "version": __version__,
            "description": "A self-hosted LLM gateway: OpenAI-compatible data plane (`/v1`) and "
                           "admin API (`/admin/v1`). Errors are "
                           '`{"error": {"message", "type", "param", "code"}}`; on Anthropic\'s '
                           'paths, `{"type": "error", "error": {"type", "message"}}`.',
        },
        "security": [{"bearer": []}],
        # Who may call each operation (its `x-llmgw-access`), beyond what `security` can say.
        "x-llmgw-access": {access.value: access.who for access in Access},
        "tags": [{"name": t, "description": TAGS[t]} if t in TAGS else {"name": t} for t in tags],
        "paths": {path: _with_path_parameters(path, ops) for path, ops in paths.items()},
        "components": _components(schemas),
    }


def serve(endpoints: Sequence[Endpoint[Any, Any]]) -> Endpoint[None, None]:
    """`GET /openapi.json`: the document of `endpoints` (which may include this one), built at
    the first request and kept; no key needed (it holds no secrets)."""
    built: list[bytes] = []

    async def answer(_request: web.Request) -> web.StreamResponse:
        if not built:
            built.append(orjson.dumps(document(endpoints)))
        return web.Response(body=built[0], content_type=JSON)

    return raw("openapi", "GET", "/openapi.json", "This OpenAPI document", "meta", answer,
               access=Access.PUBLIC,
               description="llmgw's OpenAPI 3.1 document: every operation this server answers, "
                           "made from the declarations its routes are made from.")


def _models(endpoints: Sequence[Endpoint[Any, Any]]) -> list[tuple[type[BaseModel], Mode]]:
    out: dict[tuple[type[BaseModel], Mode], None] = {}
    for ep in endpoints:
        for model, mode in ((ep.body, "validation"), (ep.query, "validation"),
                            (ep.returns, "serialization")):
            if isinstance(model, type) and issubclass(model, BaseModel):
                out[(model, mode)] = None  # type: ignore[index]
    if any(ep.body_schema == POLICY_BODY for ep in endpoints):
        out[(Policy, "validation")] = None
    return list(out)


def _schemas(endpoints: Sequence[Endpoint[Any, Any]]) -> tuple[dict[Any, Schema], Schema]:
    """Each model's reference, and every schema under components/schemas."""
    pairs = _models(endpoints)
    refs, top = models_json_schema(pairs, ref_template=_COMPONENTS + "{model}")
    return dict(refs), dict(top.get("$defs", {}))


def _operation(ep: Endpoint[Any, Any], refs: dict[Any, Schema], schemas: Schema) -> Schema:
    answer = ep.returns_schema or refs.get((ep.returns, "serialization")) or {"type": "object"}
    content = {ct: {"schema": answer if ct == JSON else {"type": "string"}} for ct in ep.content}
    errors = {"$ref": f"#/components/responses/{ep.errors}"}
    op: Schema = {
        "operationId": ep.name,
        "summary": ep.summary,
        "tags": [ep.tag],
        "x-llmgw-access": ep.access.value,
        "responses": {str(ep.status): {"description": ep.summary, "content": content},
                      "4XX": errors, "5XX": errors},
    }
    handler = ep.raw or ep.handler
    description = ep.description or inspect.cleandoc(handler.__doc__ or "")
    if description:
        op["description"] = description
    body = ep.body_schema or refs.get((ep.body, "validation"))
    if body is not None:
        media: Schema = {"schema": body} | ({"example": ep.example} if ep.example else {})
        op["requestBody"] = {"required": True, "content": {JSON: media}}
    if ep.query is not None:
        op["parameters"] = _query(schemas[_name(refs[(ep.query, "validation")])])
    if ep.access == Access.PUBLIC:
        op["security"] = []
    return op


def _name(ref: Schema) -> str:
    return str(ref["$ref"]).removeprefix(_COMPONENTS)


def _query(model: Schema) -> list[Schema]:
    """A query model's fields as optional query parameters (a query has no null: left out is)."""
    params = []
    for name, prop in model.get("properties", {}).items():
        schema = {k: v for k, v in prop.items() if k not in ("title", "default", "anyOf", "description")}
        options = [s for s in prop.get("anyOf", []) if s.get("type") != "null"]
        if len(options) == 1:
            schema |= options[0]
        param: Schema = {"name": name, "in": "query", "required": name in model.get("required", []),
                         "schema": schema}
        if "description" in prop:
            param["description"] = prop["description"]
        params.append(param)
    return params


def _with_path_parameters(path: str, ops: Schema) -> Schema:
    """Each templated path declares its parameters once, for all its methods."""
    policy_name = Policy.model_json_schema()["properties"]["name"]["pattern"]
    pattern = policy_name if path.startswith("/admin/v1/guard/") else NAME_PATTERN
    params = [{"name": n, "in": "path", "required": True,
               "schema": {"type": "string", "minLength": 1} | ({"pattern": pattern} if n == "name" else {})}
              for n in _PARAM.findall(path)]
    return {**ops, "parameters": params} if params else ops


def _components(schemas: Schema) -> Schema:
    """The models' schemas, with what their validators check that a JSON schema cannot show."""
    for named in ("Model", "ServeRequest", "ModelOut"):
        if named in schemas:
            schemas[named]["properties"]["name"] |= {"pattern": NAME_PATTERN,
                                                     "maxLength": MODEL_NAME_MAX}
    if "HubSource" in schemas:
        schemas["HubSource"]["properties"]["repo"]["pattern"] = _REPO_RE.pattern
    if "RemoteSource" in schemas:
        schemas["RemoteSource"]["properties"]["base_url"]["pattern"] = "^https?://"
    # `kind` has a default, but the discriminated union needs it on the wire.
    for source in ("LocalSource", "HubSource", "RemoteSource"):
        if source in schemas:
            schemas[source]["required"] = ["kind", *schemas[source].get("required", [])]
    if "Policy" in schemas:
        body = {**schemas["Policy"], "title": "PolicyBody"}
        body["required"] = [r for r in body["required"] if r != "name"]
        body["properties"] = {**body["properties"], "judges": {
            **body["properties"]["judges"], "examples": [["qwen3guard-0.6b"]]}}
        schemas["PolicyBody"] = body
    if "LabelRequest" in schemas:  # NodeAdmin checks the label rules; the document shows them.
        labels = schemas["LabelRequest"]["properties"]
        labels["set"] |= {"propertyNames": {"pattern": LABEL_KEY_PATTERN},
                          "maxProperties": MAX_LABELS,
                          "additionalProperties": {"type": "string", "pattern": LABEL_VALUE_PATTERN}}
        labels["remove"] |= {"maxItems": MAX_LABELS}
    schemas["Error"] = ERROR
    schemas["AnthropicError"] = ANTHROPIC_ERROR
    schemas["JsonRpcError"] = JSONRPC_ERROR
    return {
        "schemas": schemas,
        "responses": {
            "Error": {"description": "An error in OpenAI's shape.",
                      "content": {JSON: {"schema": {"$ref": f"{_COMPONENTS}Error"}}}},
            "AnthropicError": {"description": "An error in Anthropic's shape (the Messages API).",
                               "content": {JSON: {"schema": {"$ref": f"{_COMPONENTS}AnthropicError"}}}},
            "JsonRpcError": {"description": "An error in JSON-RPC's shape (`/mcp`).",
                             "content": {JSON: {"schema": {"$ref": f"{_COMPONENTS}JsonRpcError"}}}},
        },
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "An llmgw API key: `Authorization: Bearer sk-llmgw-...`."},
            "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key",
                          "description": "The same key as Anthropic's clients send it."},
        },
    }

