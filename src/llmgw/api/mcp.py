"""`/mcp` and `/mcp/{bundle}`: MCP's streamable HTTP transport, behind llmgw's keys.

A POST carries one JSON-RPC message; a request's answer is `application/json` (or one
server-sent event when the client accepts only `text/event-stream`), a notification's is 202.
There is no server-initiated stream (GET is the router's 405, as for any method not served) and
nothing to end (DELETE of a good session is 204): a session lives in its sealed id
(`gateway.mcp.sessions`), so any worker of any server answers it. Every refusal the endpoint
makes is JSON-RPC's error shape: 401 (with `WWW-Authenticate: Bearer`) for a missing or bad key,
400 for a request without its session or a body that is no message, 403 for a web page of an
origin not allowed (DNS rebinding), 404 for a session that is not this key's on this endpoint.

Also the admin API's `GET /admin/v1/mcp/servers/{name}/tools`: a server's tools as it lists
them now.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from llmgw.api.appkeys import GATEWAY, MCP
from llmgw.api.body import check_shape, read_body
from llmgw.api.context import REQUEST_ID
from llmgw.api.endpoints import JSON, Call, Endpoint, obj, raw
from llmgw.core.errors import InvalidRequest, LlmgwError, NotFound, UpstreamError
from llmgw.core.mcp import BUNDLE_NAME
from llmgw.core.types import ApiKey
from llmgw.gateway.mcp import wire
from llmgw.gateway.mcp.catalog import TOOLS
from llmgw.gateway.mcp.service import Asked
from llmgw.gateway.mcp.upstream import SESSION_HEADER, VERSION_HEADER

SSE = "text/event-stream"
_BUNDLE = re.compile(BUNDLE_NAME)


def _reply(status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
           *, sse: bool = False) -> web.Response:
    if body is None:
        return web.Response(status=status, headers=headers)
    data = orjson.dumps(body)
    if sse:
        return web.Response(status=status, body=b"event: message\ndata: " + data + b"\n\n",
                            headers={**(headers or {}), "Content-Type": SSE,
                                     "Cache-Control": "no-cache"})
    return web.Response(status=status, body=data, headers=headers, content_type=JSON)


def _refusal(status: int, code: int, message: str, id_: wire.Id = None,
             headers: dict[str, str] | None = None) -> web.Response:
    return _reply(status, wire.error(id_, code, message), headers)


def _bundle(request: web.Request) -> str | None:
    bundle = request.match_info.get("bundle")
    if bundle is not None and not _BUNDLE.fullmatch(bundle):
        raise NotFound("no such MCP bundle")
    return bundle


def _key(request: web.Request) -> ApiKey:
    return request.app[GATEWAY].authenticate(request.headers.get("Authorization"))


def _refused(exc: LlmgwError, id_: wire.Id = None) -> web.Response:
    """A failure that is the HTTP answer's (a key, a body, a limit), as JSON-RPC's error shape."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(exc.retry_after_s)
    code = wire.INTERNAL_ERROR if exc.status >= 500 else wire.INVALID_REQUEST
    return _refusal(exc.status, code, exc.message, id_, headers)


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def origin_allowed(origin: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request with this `Origin` may be answered: none (a client that is no browser),
    this machine's own pages, or an origin the install allows (`[server] mcp_origins`). A page
    of another site that a rebound name points at this server is refused."""
    if origin is None:
        return True
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in LOOPBACK or origin.rstrip("/").lower() in allowed


def _foreign(request: web.Request) -> web.Response | None:
    """The 403 for a web page of an origin not allowed (`origin_allowed`); None otherwise."""
    if origin_allowed(request.headers.get("Origin"), request.app[MCP].origins):
        return None
    return _refusal(403, wire.INVALID_REQUEST,
                    "Forbidden: this Origin may not call /mcp (see [server] mcp_origins)")


def _unknown_session(request: web.Request, key: ApiKey, bundle: str | None, id_: wire.Id = None,
                     hint: str = "") -> web.Response | None:
    """The 400 for a request without a session, the 404 for one that is not this key's on this
    endpoint; None for the caller's own session."""
    sid = request.headers.get(SESSION_HEADER)
    if sid is None:
        return _refusal(400, wire.INVALID_REQUEST, f"Bad Request: no {SESSION_HEADER} header{hint}",
                        id_)
    if request.app[MCP].session(key, bundle, sid) is None:
        return _refusal(404, wire.INVALID_REQUEST, "Session not found", id_)
    return None


def _accepts(request: web.Request) -> tuple[bool, bool]:
    """Whether the client takes JSON, and server-sent events (no Accept: it takes anything)."""
    accept = request.headers.get("Accept", "").lower()
    if not accept.strip():
        return True, True
    anything = "*/*" in accept
    return anything or JSON in accept or "application/*" in accept, anything or SSE in accept


async def post(request: web.Request) -> web.StreamResponse:
    """One JSON-RPC message, answered."""
    if (foreign := _foreign(request)) is not None:
        return foreign
    try:
        key, bundle = _key(request), _bundle(request)
        json_ok, sse_ok = _accepts(request)
        if not (json_ok or sse_ok):
            return _refusal(406, wire.INVALID_REQUEST,
                            "Not Acceptable: accept application/json or text/event-stream")
        message = _message(await read_body(request))
    except LlmgwError as exc:
        return _refused(exc)
    if isinstance(message, web.Response):
        return message
    mcp = request.app[MCP]
    id_: wire.Id = message.get("id")
    if message.get("method") != "initialize":
        unknown = _unknown_session(request, key, bundle, id_, "; send initialize first")
        if unknown is not None:
            return unknown
        version = request.headers.get(VERSION_HEADER)
        if version is not None and version not in wire.VERSIONS:
            return _refusal(400, wire.INVALID_REQUEST,
                            f"Bad Request: unsupported {VERSION_HEADER}", id_)
    try:
        answered = await mcp.answer(Asked(key, bundle, message, request.get(REQUEST_ID, "")))
    except LlmgwError as exc:  # a limit: 429 (or 503) with its Retry-After
        return _refused(exc, id_)
    if answered.body is None:
        return _reply(202)
    headers = {SESSION_HEADER: answered.session_id} if answered.session_id else None
    return _reply(200, answered.body, headers, sse=not json_ok)


async def delete(request: web.Request) -> web.StreamResponse:
    """Ends a session: nothing is kept anywhere, so this only checks it is the caller's."""
    if (foreign := _foreign(request)) is not None:
        return foreign
    try:
        key, bundle = _key(request), _bundle(request)
    except LlmgwError as exc:
        return _refused(exc)
    # A response is a mapping (empty here), so never `or`: it would read as false.
    unknown = _unknown_session(request, key, bundle)
    return unknown if unknown is not None else web.Response(status=204)


def _message(body: bytes) -> dict[str, Any] | web.Response:
    """The body's one JSON-RPC message, or the 400 that says why it is none."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _refusal(400, wire.PARSE_ERROR, "Parse error: the body is not JSON")
    if isinstance(message, list):
        return _refusal(400, wire.INVALID_REQUEST, "batches are not supported: send one message")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _refusal(400, wire.INVALID_REQUEST,
                        "Invalid Request: send one JSON-RPC 2.0 message")
    id_ = message.get("id")
    if not (id_ is None or type(id_) in (str, int)):  # JSON's true and false are no ids
        return _refusal(400, wire.INVALID_REQUEST, "Invalid Request: an id is a string or an integer")
    try:
        check_shape(message)
    except InvalidRequest as exc:
        return _refusal(400, wire.INVALID_REQUEST, exc.message)
    return message


async def server_tools(call: Call[None, None]) -> dict[str, Any]:
    """The server's tools as it lists them now (asked afresh)."""
    mcp = call.app[MCP]
    server = mcp.catalog.server(call.params["name"], None)
    if server is None:
        raise NotFound(f"MCP server {call.params['name']!r} does not exist or is disabled",
                       param="name")
    items = await mcp.catalog.items(server, TOOLS, fresh=True)
    if items is None:
        raise UpstreamError(f"MCP server {server.name} did not list its tools (see the log)")
    return {"server": server.name, "tools": [
        {"name": t.get("name"), "description": t.get("description"),
         "inputSchema": t.get("inputSchema")} for t in items]}


_DOC = ("MCP's streamable HTTP transport: one JSON-RPC message per POST, answered as JSON (or "
        "one server-sent event when the client accepts only that). The tools, prompts and "
        "resources of the upstream MCP servers the key's grants reach, tools and prompts "
        "named `SERVER__NAME`.")
_MESSAGE = obj(("jsonrpc",), jsonrpc={"const": "2.0"}, method={"type": "string"},
               id={"type": ["string", "integer"]}, params={"type": "object"})
PUBLIC: list[Endpoint[Any, Any]] = []
for _path, _what in (("/mcp", "every enabled server"), ("/mcp/{bundle}", "a bundle's servers")):
    _suffix = "" if _path == "/mcp" else "_bundle"
    PUBLIC += [
        raw(f"mcp_post{_suffix}", "POST", _path, f"MCP message ({_what})", "mcp", post,
            body_schema=_MESSAGE, content=(JSON, SSE), description=_DOC, errors="JsonRpcError"),
        raw(f"mcp_delete{_suffix}", "DELETE", _path, "End an MCP session", "mcp", delete,
            status=204, errors="JsonRpcError"),
    ]
SERVER_TOOLS: Endpoint[None, None] = Endpoint(
    "mcp_server_tools", "GET", "/admin/v1/mcp/servers/{name}/tools",
    "An MCP server's tools, as it lists them now", "mcp", server_tools,
    returns_schema=obj(("server", "tools"), server={"type": "string"}, tools={
        "type": "array", "items": obj(("name",), name={"type": "string"},
                                      description={"type": ["string", "null"]},
                                      inputSchema={"type": ["object", "null"]})}))
ENDPOINTS: list[Endpoint[Any, Any]] = [*PUBLIC, SERVER_TOOLS]
