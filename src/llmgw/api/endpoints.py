"""Route declarations: each endpoint said once, with who may call it, what it takes and what it
answers. The HTTP routes (`bind`), the console's calls (`invoke`) and the OpenAPI document are all
made from these, so none of them can drift from another."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar, cast

from aiohttp import web
from pydantic import BaseModel, ValidationError

from llmgw.api import roles
from llmgw.api.appkeys import GATEWAY
from llmgw.api.body import json_response, read_json
from llmgw.api.context import client_address
from llmgw.core import audit, users
from llmgw.core.errors import Forbidden, InvalidRequest, Unauthenticated
from llmgw.core.types import ApiKey, KeyScope
from llmgw.core.users import Person
from llmgw.gateway.auth import require_admin
from llmgw.gateway.service import CLIENT_SCOPES

B = TypeVar("B")
Q = TypeVar("Q")
M = TypeVar("M", bound=BaseModel)

JSON = "application/json"
Schema = dict[str, Any]
# A handler that answers the request itself (the data plane: streams, its own dialects).
Raw = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Shapes a raw JSON body before it is validated: fields the server sets dropped, path parameters
# merged in.
Shape = Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]]

NODE_SCOPES = frozenset({KeyScope.NODE})
SCRAPER_SCOPES = frozenset({KeyScope.ADMIN, KeyScope.METRICS})


class Access(StrEnum):
    """Who may call an endpoint."""

    PUBLIC = "public"
    KEY = "key"
    ADMIN = "admin"
    NODE = "node"
    SCRAPER = "scraper"  # raw `/metrics` checks it itself, as the install may make it public

    @property
    def who(self) -> str:
        """Who may call an endpoint of this access, as the OpenAPI document says it."""
        return _WHO[self]


_WHO = {
    Access.PUBLIC: "Anyone: no key.",
    Access.KEY: "Any admin or user key.",
    Access.ADMIN: "Admin keys only.",
    Access.NODE: "Node join tokens only (`llmgw ctl node token create`): the node agents.",
    Access.SCRAPER: "Admin or metrics keys, or anyone when the install sets `metrics_public`.",
}


@dataclass(frozen=True)
class Call(Generic[B, Q]):
    """One call of an endpoint, checked and validated: what its handler works from."""

    app: web.Application  # services: app[CATALOG], app[KEYS], ...
    key: ApiKey | None  # None only for PUBLIC
    body: B  # the validated body model (None when the endpoint has none)
    query: Q  # the validated query model (None when none)
    params: Mapping[str, str]  # path parameters
    request: web.Request | None  # None when invoked by the console

    @property
    def caller(self) -> ApiKey:
        """The calling key: every endpoint but a PUBLIC one has it."""
        if self.key is None:
            raise Unauthenticated("this endpoint needs a key")
        return self.key


@dataclass(frozen=True)
class Endpoint(Generic[B, Q]):
    """One route: its operation id, method and aiohttp path, its handler and models."""

    name: str  # operationId, unique, e.g. "list_models"
    method: str
    path: str  # aiohttp path, e.g. "/admin/v1/models/{name:.+}"
    summary: str
    tag: str
    handler: Callable[[Call[B, Q]], Awaitable[Any]]  # returns a protocol model
    access: Access = Access.ADMIN
    body: type[B] | None = None
    query: type[Q] | None = None
    returns: Any = None  # the response model/type for the OpenAPI document
    status: int = 200
    example: dict[str, Any] | None = None
    shape: Shape | None = None
    # For the document where no model says it: a hand-described body or answer.
    body_schema: Schema | None = None
    returns_schema: Schema | None = None
    content: tuple[str, ...] = (JSON,)
    # The error shape: "Error" (OpenAI's), "AnthropicError" or "JsonRpcError" (`/mcp`).
    errors: str = "Error"
    raw: Raw | None = None  # set: the route goes straight to it (see `raw`)
    # The document's description of the operation; empty: the handler's docstring, if any.
    description: str = ""


def raw(name: str, method: str, path: str, summary: str, tag: str, handler: Raw, *,
        access: Access = Access.KEY, **doc: Any) -> Endpoint[None, None]:
    """An endpoint whose handler answers the request itself and checks its own access: the
    data plane, whose hot path gets nothing added (no per-request wrapper, no validation);
    `doc` describes it for the document (body_schema, returns_schema, content, ...)."""
    return Endpoint(name, method, path, summary, tag, _http_only, access=access, raw=handler, **doc)


async def _http_only(call: Call[None, None]) -> Any:
    raise InvalidRequest("this endpoint is answered over HTTP only")


def obj(required: tuple[str, ...] = (), **props: Schema) -> Schema:
    """A hand-described JSON object with these properties (others are allowed)."""
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


def invalid(exc: ValidationError) -> InvalidRequest:
    """A validation failure as a 400 naming its first field."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or None
    # A validator's own words, without pydantic's label for them.
    message = str(first["msg"]).removeprefix("Value error, ")
    return InvalidRequest(f"{where + ': ' if where else ''}{message}", param=where)


def validate(model: type[M], data: Any, *, controls: bool = False) -> M:
    """`data` as `model`, or a 400 naming the first field that is wrong: the one place a client's
    input becomes a model. No text in it may hold NUL, and, unless `controls`, no other control
    character than tab and line breaks (`plain_text`)."""
    plain_text(data, "", controls=controls)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc) from exc


# Every text a client sends may end up stored: PostgreSQL refuses NUL in text and JSON columns
# (an error that must not be a 500), and the other control characters are never meant in a
# name, a note or a URL, where they would reach terminals and logs as they came.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def plain_text(value: Any, where: str, *, controls: bool = False) -> None:
    """Raise a 400 naming the first field (`where`, dotted) of JSON-like `value` whose text (a
    value, or a name in an object: then the object is named) holds NUL or, unless `controls`,
    another control character than tab, line feed and carriage return; the message never
    quotes the text."""
    if isinstance(value, str):
        if "\x00" in value:
            what = "NUL"
        elif not controls and _CONTROL.search(value):
            what = "control characters (other than tab and line breaks)"
        else:
            return
        raise InvalidRequest(f"{where + ': ' if where else ''}must not contain {what}",
                             param=where or None)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            # A bad name is told by where it is, never quoted.
            plain_text(str(k), where, controls=controls)
            plain_text(v, f"{where}.{k}" if where else str(k), controls=controls)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            plain_text(v, f"{where}.{i}" if where else str(i), controls=controls)


def _permit(access: Access, key: ApiKey) -> None:
    """The scope check for a key already resolved (the console's session)."""
    if access == Access.ADMIN:
        require_admin(key)
    elif access == Access.KEY and key.scope not in CLIENT_SCOPES:
        raise Forbidden("this endpoint takes admin or user keys only")
    elif access == Access.NODE and key.scope != KeyScope.NODE:
        raise Forbidden("this endpoint takes node join tokens only")
    elif access == Access.SCRAPER and key.scope not in SCRAPER_SCOPES:
        raise Forbidden("this endpoint takes admin or metrics keys only")


def _caller(access: Access, request: web.Request) -> ApiKey | None:
    gateway, authorization = request.app[GATEWAY], request.headers.get("Authorization")
    if access == Access.PUBLIC:
        return None
    if access == Access.NODE:
        return gateway.authenticate(authorization, NODE_SCOPES)
    if access == Access.SCRAPER:
        return gateway.authenticate(authorization, SCRAPER_SCOPES)
    key = gateway.authenticate(authorization)
    if access == Access.ADMIN:
        require_admin(key)
    return key


def _call(ep: Endpoint[B, Q], app: web.Application, key: ApiKey | None, payload: Any,
          query: Mapping[str, str], params: Mapping[str, str],
          request: web.Request | None) -> Call[B, Q]:
    body: Any = None
    if ep.body is not None:
        if ep.shape is not None and isinstance(payload, dict):
            payload = ep.shape(payload, params)
        # A node agent's report quotes its engines' errors, which may carry a terminal's escapes.
        body = validate(cast(type[BaseModel], ep.body), payload, controls=ep.access == Access.NODE)
    q: Any = validate(cast(type[BaseModel], ep.query), query) if ep.query is not None else None
    return Call(app, key, body, q, params, request)


def _answer(result: Any, status: int) -> web.StreamResponse:
    if isinstance(result, web.StreamResponse):
        return result
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    return json_response(result, status=status)


def _first(query: Mapping[str, str]) -> dict[str, str]:
    """A query's parameters, each at its first value (a repeated one is not a list here)."""
    out: dict[str, str] = {}
    for name, value in query.items():
        out.setdefault(name, value)
    return out


def _route(ep: Endpoint[Any, Any]) -> web.RouteDef:
    if ep.raw is not None:
        return web.route(ep.method, ep.path, ep.raw)

    async def handle(request: web.Request) -> web.StreamResponse:
        key = _caller(ep.access, request)
        payload = (await read_json(request))[1] if ep.body is not None else None
        call = _call(ep, request.app, key, payload, _first(request.query), request.match_info,
                     request)
        with audit.from_address(client_address(request)):
            return _answer(await _handled(ep, call), ep.status)

    return web.route(ep.method, ep.path, handle)


def bind(endpoints: Iterable[Endpoint[Any, Any]]) -> list[web.RouteDef]:
    """The HTTP routes: each checks the caller's key, validates body and query, calls the handler
    and answers its model as JSON (every failure is the error middleware's to shape)."""
    return [_route(ep) for ep in endpoints]


async def invoke(ep: Endpoint[Any, Any], app: web.Application, caller: ApiKey | Person, *,
                 body: BaseModel | dict[str, Any] | None = None,
                 query: Mapping[str, str] | None = None,
                 params: Mapping[str, str] | None = None) -> Any:
    """Call `ep` as `caller` without HTTP (the console): the same access check (a person's, by
    their role: `api.roles`) and validation, the handler's protocol model back, the same
    `core.errors` raised."""
    if ep.raw is not None:
        raise InvalidRequest(f"{ep.name} is answered over HTTP only")
    if isinstance(caller, Person):
        refused = roles.refusal(caller.grant, ep)
        if refused is not None:
            raise Forbidden(refused)
        key = caller.key
    else:
        key = caller
        _permit(ep.access, key)
    payload: Any = body
    if isinstance(body, BaseModel):
        # Unset fields stay unset: "left out" means "unchanged" to some requests (scale's idle_s).
        payload = body.model_dump(mode="json", exclude_unset=True)
    if ep.body is not None and payload is None:
        raise InvalidRequest("request body is empty; send a JSON object")
    call = _call(ep, app, key, payload, dict(query or {}), dict(params or {}), None)
    return await _handled(ep, call)


async def _handled(ep: Endpoint[B, Q], call: Call[B, Q]) -> Any:
    """The handler's answer; a write by an admin or user key runs as that key, so every change
    it makes to the install goes to the audit log under it (the console's writes too)."""
    if ep.method == "GET" or call.key is None or ep.access not in (Access.ADMIN, Access.KEY):
        return await ep.handler(call)
    with audit.acting(who(call.key)):
        return await ep.handler(call)


def who(key: ApiKey) -> str:
    """Who made a change, as the catalog's `by` and the audit log record it."""
    return users.who(key)
