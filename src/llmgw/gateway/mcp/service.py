"""The `/mcp` endpoint's protocol: one JSON-RPC message from a key, answered from the upstream
servers its grants reach.

Names: a tool or prompt is `SERVER__NAME` to clients (`core.mcp.tool_name`). A resource's URI
is the upstream's behind `llmgw+SERVER:` (`file:///a` of server `docs` is
`llmgw+docs:file:///a`), templates likewise: a read finds its server from the URI alone, with
no state anywhere. Whatever the key may not use is as absent as what does not exist: the same
JSON-RPC error (-32602) for both.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from llmgw.core.errors import (
    InvalidRequest,
    LimitsUnavailable,
    LlmgwError,
    McpRefused,
    McpResultTooLarge,
    RateLimited,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from llmgw.core.mcp import McpServer, split_tool_name, tool_name
from llmgw.core.types import ApiKey
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limits import Limiter
from llmgw.gateway.mcp import access, sessions, wire
from llmgw.gateway.mcp.accounting import ToolAccounting
from llmgw.gateway.mcp.call import ToolCall, ToolNext, ToolResult, ToolStage, compose_tools
from llmgw.gateway.mcp.catalog import PROMPTS, RESOURCES, TEMPLATES, TOOLS, McpCatalog
from llmgw.gateway.mcp.stages.guard import guard_stage
from llmgw.gateway.mcp.stages.limits import limits_stage
from llmgw.guard.enforcement import Guard

URI_PREFIX = "llmgw+"
# A name or URI a refusal may quote back (the spec's "Unknown tool: NAME").
_PLAIN = re.compile(r"[A-Za-z0-9_.:/+{}-]{1,256}")
SERVER_INFO = {"name": "llmgw", "version": "1"}
# `logging`: a client may set a level; llmgw holds no stream to send log messages on, so it
# sends none at any level.
CAPABILITIES = {"tools": {"listChanged": False}, "prompts": {"listChanged": False},
                "resources": {"listChanged": False}, "logging": {}}


@dataclass(frozen=True, slots=True)
class Asked:
    """One message as the endpoint received it, from a key already authenticated."""

    key: ApiKey
    bundle: str | None
    message: dict[str, Any]
    request_id: str = ""  # llmgw's id for the HTTP request


@dataclass(frozen=True, slots=True)
class Answered:
    """The JSON-RPC answer (None for a notification) and, after `initialize`, the new session."""

    body: dict[str, Any] | None
    session_id: str | None = None


def tool_stages(limiter: Limiter | None, guard: Guard | None) -> list[ToolStage]:
    """The stages every `tools/call` runs, in order, before the upstream: limits, then guard."""
    stages = [] if limiter is None else [limits_stage(limiter)]
    judged = guard_stage(guard)
    return stages if judged is None else [*stages, judged]


class McpService:
    """Answers MCP messages; reads only memory and the upstreams, never the store."""

    def __init__(self, catalog: McpCatalog, keys: Callable[[], KeyCache], secret: bytes,
                 stages: list[ToolStage] | None = None,
                 wall: Callable[[], float] = time.time,
                 accounting: ToolAccounting | None = None,
                 origins: frozenset[str] = frozenset()) -> None:
        self.catalog = catalog
        # Web origins besides loopback ones whose pages may call `/mcp` (`origin_allowed`).
        self.origins = origins
        self._keys = keys
        self._secret = secret
        self._wall = wall
        self._chain = compose_tools(stages or [], self._upstream)
        # Usage, metrics and the span of each call (None: not counted, as in unit tests).
        self._accounting = accounting

    async def close(self) -> None:
        """Close what the upstream client holds open (its HTTP+SSE streams)."""
        await self.catalog.client.close()

    def session(self, key: ApiKey, bundle: str | None, session_id: str) -> sessions.Session | None:
        """The session `session_id` when `key` opened it on `bundle`, else None."""
        return sessions.unseal(self._secret, session_id, key.id, bundle)

    async def answer(self, asked: Asked) -> Answered:
        """The answer to one message (`initialize` opens a session). A limit's refusal is
        raised (RateLimited, LimitsUnavailable): it is the HTTP answer's, not JSON-RPC's."""
        msg = asked.message
        method, id_ = msg.get("method"), msg.get("id")
        params = msg.get("params")
        if not isinstance(params, dict):
            params = {}
        if "id" not in msg:  # a notification (or a response to nothing llmgw asked): no answer
            return Answered(None)
        if not isinstance(method, str):
            return Answered(wire.error(id_, wire.INVALID_REQUEST, "a request names its method"))
        if method == "initialize":
            return self._initialize(asked, id_, params)
        handler = _METHODS.get(method)
        if handler is None:
            return Answered(wire.error(id_, wire.METHOD_NOT_FOUND, "Method not found"))
        try:
            return Answered(wire.result(id_, await handler(self, asked, params)))
        except (RateLimited, LimitsUnavailable):
            raise  # the endpoint's to answer: HTTP 429 (or 503) with its Retry-After
        except InvalidRequest as exc:  # an unknown or forbidden name, bad params
            return Answered(wire.error(id_, wire.INVALID_PARAMS, exc.message))
        except LlmgwError as exc:  # an upstream's failure, in llmgw's words
            return Answered(wire.error(id_, wire.INTERNAL_ERROR, exc.message))

    def _initialize(self, asked: Asked, id_: wire.Id, params: dict[str, Any]) -> Answered:
        version = wire.negotiate(params.get("protocolVersion"))
        sid = sessions.seal(self._secret, sessions.Session(
            asked.key.id, version, asked.bundle, int(self._wall())))
        return Answered(wire.result(id_, {"protocolVersion": version, "capabilities": CAPABILITIES,
                                          "serverInfo": SERVER_INFO}), sid)

    # Lists -------------------------------------------------------------------------------

    async def _tools(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        return {"tools": await self._named(asked, TOOLS)}

    async def _prompts(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        return {"prompts": await self._named(asked, PROMPTS)}

    async def _named(self, asked: Asked, which: tuple[str, str]) -> list[dict[str, Any]]:
        """The tools (or prompts) the key may use, each as `SERVER__NAME`."""
        keys = self._keys()
        out = []
        for server, items in await self.catalog.gather(self.catalog.servers(asked.bundle), which):
            for item in items:
                name = item.get("name")
                if isinstance(name, str) and access.may_use(keys, asked.key, server.name, name):
                    out.append({**item, "name": tool_name(server.name, name)})
        return out

    async def _resources(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        return {"resources": await self._addressed(asked, RESOURCES, "uri")}

    async def _templates(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        return {"resourceTemplates": await self._addressed(asked, TEMPLATES, "uriTemplate")}

    async def _addressed(self, asked: Asked, which: tuple[str, str],
                         field: str) -> list[dict[str, Any]]:
        """The resources (or templates) of the servers the key may read, each with its address
        (`field`) carrying its server (`_uri`)."""
        keys = self._keys()
        readable = [s for s in self.catalog.servers(asked.bundle)
                    if access.may_read(keys, asked.key, s.name)]
        out: list[dict[str, Any]] = []
        for server, items in await self.catalog.gather(readable, which):
            out.extend({**r, field: _uri(server, r[field])} for r in items
                       if isinstance(r.get(field), str))
        return out

    # Uses --------------------------------------------------------------------------------

    async def _call(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        server, tool = self._granted(asked, params.get("name"), "tool")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidRequest("a tool's arguments are a JSON object")
        call = ToolCall(asked.key, server, tool, arguments, asked.request_id)
        try:
            return (await self._accounted(call, asked.message.get("id"))).as_json()
        except McpRefused as exc:
            if exc.rpc_code in (wire.INVALID_PARAMS, wire.METHOD_NOT_FOUND):
                raise InvalidRequest(_unknown("tool", params.get("name"))) from exc
            return ToolResult.error(exc.message).as_json()

    async def _accounted(self, call: ToolCall, rpc_id: object) -> ToolResult:
        if self._accounting is None:
            return await self._chain(call)
        async with self._accounting.accounted(
                call, rpc_id if isinstance(rpc_id, str | int) else None) as acct:
            result = await self._chain(call)
            acct.result(result)
            return result

    async def _upstream(self, call: ToolCall) -> ToolResult:
        """The chain's last link: the call at its server, its failures as tool errors the
        agent reads (a JSON-RPC refusal propagates: it may say the tool does not exist)."""
        shown = tool_name(call.server.name, call.tool)
        endpoint = self.catalog.endpoint_of(call.server)
        if endpoint is None:
            return ToolResult.error(f"MCP server {call.server.name} is not available now")
        try:
            answer = await self.catalog.client.request(
                call.server, endpoint, "tools/call", {"name": call.tool, "arguments": call.arguments})
        except McpRefused:
            raise
        except UpstreamTimeout:
            return ToolResult.error(f"The tool {shown} timed out: no answer within "
                                    f"{call.server.timeout_s:g}s")
        except McpResultTooLarge:
            return ToolResult.error(f"The tool {shown}'s result is larger than "
                                    f"{call.server.max_result_bytes} bytes and was withheld")
        except LlmgwError as exc:
            return ToolResult.error(f"The tool {shown} failed: {exc.message}")
        res = answer.result
        content = res.get("content")
        structured = res.get("structuredContent")
        return ToolResult(
            content=[c for c in content if isinstance(c, dict)] if isinstance(content, list) else [],
            is_error=res.get("isError") is True,
            structured=structured if isinstance(structured, dict) else None, size=answer.size)

    async def _prompt(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        server, prompt = self._granted(asked, params.get("name"), "prompt")
        arguments = params.get("arguments")
        forwarded: dict[str, Any] = {"name": prompt}
        if isinstance(arguments, dict):
            forwarded["arguments"] = arguments
        return await self._relay(server, "prompts/get", forwarded, "prompt", params.get("name"))

    async def _read(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        uri = params.get("uri")
        found = _split_uri(uri) if isinstance(uri, str) else None
        server = self.catalog.server(found[0], asked.bundle) if found else None
        if found is None or server is None or \
                not access.may_read(self._keys(), asked.key, server.name):
            raise InvalidRequest(_unknown("resource", uri))
        res = await self._relay(server, "resources/read", {"uri": found[1]}, "resource", uri)
        contents = res.get("contents")
        if isinstance(contents, list):
            res = {**res, "contents": [{**c, "uri": _uri(server, c["uri"])}
                                       if isinstance(c, dict) and isinstance(c.get("uri"), str)
                                       else c for c in contents]}
        return res

    async def _relay(self, server: McpServer, method: str, params: dict[str, Any], what: str,
                     shown: object) -> dict[str, Any]:
        endpoint = self.catalog.endpoint_of(server)
        if endpoint is None:
            raise UpstreamUnreachable(f"MCP server {server.name} is not available now")
        try:
            return (await self.catalog.client.request(server, endpoint, method, params)).result
        except McpRefused as exc:
            if exc.rpc_code in (wire.INVALID_PARAMS, wire.METHOD_NOT_FOUND):
                raise InvalidRequest(_unknown(what, shown)) from exc
            raise

    def _granted(self, asked: Asked, name: object, what: str) -> tuple[McpServer, str]:
        """The server and its own name for `name`, when the key may use it; else the refusal
        an unknown one gets."""
        parts = split_tool_name(name) if isinstance(name, str) else None
        server = self.catalog.server(parts[0], asked.bundle) if parts else None
        if parts is None or server is None or \
                not access.may_use(self._keys(), asked.key, server.name, parts[1]):
            raise InvalidRequest(_unknown(what, name))
        return server, parts[1]

    async def _ping(self, asked: Asked, params: dict[str, Any]) -> dict[str, Any]:
        return {}


def _unknown(what: str, name: object) -> str:
    """What a refusal says of a name: the name when it is a plain one, never other bytes."""
    shown = name if isinstance(name, str) and _PLAIN.fullmatch(name) else "(not shown)"
    return f"Unknown {what}: {shown}"


def _uri(server: McpServer, uri: str) -> str:
    return f"{URI_PREFIX}{server.name}:{uri}"


def _split_uri(uri: str) -> tuple[str, str] | None:
    if not uri.startswith(URI_PREFIX):
        return None
    server, sep, rest = uri[len(URI_PREFIX):].partition(":")
    return (server, rest) if sep and server and rest else None


_Handler = Callable[[McpService, Asked, dict[str, Any]], Awaitable[dict[str, Any]]]
_METHODS: dict[str, _Handler] = {
    "ping": McpService._ping,
    "logging/setLevel": McpService._ping,  # taken, and nothing to change (see CAPABILITIES)
    "tools/list": McpService._tools,
    "tools/call": McpService._call,
    "prompts/list": McpService._prompts,
    "prompts/get": McpService._prompt,
    "resources/list": McpService._resources,
    "resources/read": McpService._read,
    "resources/templates/list": McpService._templates,
}

__all__ = ["Asked", "Answered", "McpService", "ToolNext", "tool_stages"]
