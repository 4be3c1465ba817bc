"""llmgw as an MCP client of its upstream servers, over streamable HTTP through llmgw's one
transport (`gateway.transport`: pooled connections, its error mapping, gzip and deflate decoded,
any other encoding refused).

Each process opens its own session with each server lazily, on the first request that needs
it, and opens a new one when the server answers 404 for it (the server restarted, or forgot).
The credential is read when a request is made (`McpCredential`: an environment variable or a
file on this machine), and goes nowhere but the header it is for. Every exchange is bounded in
time (the server's `timeout_s`) and size (its `max_result_bytes`); an answer that is no MCP
(HTML from a proxy, an encoding llmgw does not decode) is an UpstreamError naming the server,
never quoting it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import Any

import orjson

from llmgw.core.errors import (
    McpRefused,
    McpResultTooLarge,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from llmgw.core.mcp import McpServer, McpTransport
from llmgw.gateway.mcp import wire
from llmgw.gateway.mcp.credentials import credential_header
from llmgw.gateway.mcp.sse import SseLink
from llmgw.gateway.transport import Connection, Transport
from llmgw.gateway.upstream.table import Upstream

logger = logging.getLogger(__name__)

ACCEPT = "application/json, text/event-stream"
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
CLIENT_INFO = {"name": "llmgw", "version": "1"}
# A list or a handshake is bounded too: by the server's result bound, and at least this.
MIN_ANSWER_BYTES = 1024 * 1024
# What the server's `max_result_bytes` bounds exactly: what a tool, a resource or a prompt gives.
BOUNDED = frozenset({"tools/call", "resources/read", "prompts/get"})


@dataclass(frozen=True, slots=True)
class Answer:
    """A request's result, and the bytes its answer took."""

    result: dict[str, Any]
    size: int


@dataclass(slots=True)
class _Session:
    id: str | None  # None: the server keeps no sessions
    version: str
    endpoint: str  # where it was opened: a server moved elsewhere gets a session there


class McpClient:
    """Requests to upstream MCP servers, each within its server's bounds."""

    def __init__(self, transport: Transport,
                 headers_of: Callable[[McpServer], dict[str, str]] = credential_header) -> None:
        self._transport = transport
        # What proves llmgw to a server: its credential, or a stdio bridge's engine key.
        self._headers_of = headers_of
        self._sessions: dict[str, _Session] = {}
        self._links: dict[str, SseLink] = {}  # HTTP+SSE servers' sessions
        self._opening: dict[str, asyncio.Lock] = {}
        self._ids = count(1)

    async def close(self) -> None:
        """End every HTTP+SSE link (their reading tasks are this client's)."""
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()

    async def request(self, server: McpServer, endpoint: str, method: str,
                      params: dict[str, Any] | None = None) -> Answer:
        """The result of `method` at `server` (listening at `endpoint`): UpstreamTimeout past
        its `timeout_s`, McpResultTooLarge past its `max_result_bytes`, McpRefused for a JSON-RPC
        error, UpstreamError for anything else that is not an answer."""
        try:
            async with asyncio.timeout(server.timeout_s):
                return await self._request(server, endpoint, method, params)
        except TimeoutError as exc:
            raise UpstreamTimeout(f"MCP server {server.name} did not answer within "
                                  f"{server.timeout_s:g}s") from exc

    async def _request(self, server: McpServer, endpoint: str, method: str,
                       params: dict[str, Any] | None) -> Answer:
        if server.transport is McpTransport.SSE:
            return await self._sse_request(server, endpoint, method, params)
        for attempt in range(2):
            session = await self._session(server, endpoint)
            rid = next(self._ids)
            conn = await self._post(server, endpoint, wire.request(rid, method, params), session)
            try:
                if conn.status == 404 and session.id is not None and attempt == 0:
                    # The server no longer knows the session: open another, once.
                    self._sessions.pop(server.name, None)
                    continue
                message, size = await _answer(server, conn, rid, _limit(server, method))
                return Answer(_result(server, message), size)
            finally:
                conn.release()
        raise UpstreamError(f"MCP server {server.name} keeps refusing its session")

    async def _session(self, server: McpServer, endpoint: str) -> _Session:
        found = self._sessions.get(server.name)
        if found is not None and found.endpoint == endpoint:
            return found
        lock = self._opening.setdefault(server.name, asyncio.Lock())
        async with lock:  # one handshake per server at a time, however many calls wait on it
            found = self._sessions.get(server.name)
            if found is None or found.endpoint != endpoint:
                found = self._sessions[server.name] = await self._initialize(server, endpoint)
            return found

    async def _initialize(self, server: McpServer, endpoint: str) -> _Session:
        rid = next(self._ids)
        body = wire.request(rid, "initialize", {
            "protocolVersion": wire.LATEST, "capabilities": {}, "clientInfo": CLIENT_INFO})
        conn = await self._post(server, endpoint, body, None)
        try:
            answer = _result(server, (await _answer(server, conn, rid, _limit(server, "")))[0])
            sid = conn.headers.get(SESSION_HEADER)
        finally:
            conn.release()
        version = answer.get("protocolVersion")
        session = _Session(sid, version if isinstance(version, str) else wire.LATEST, endpoint)
        note = await self._post(server, endpoint, wire.notification("notifications/initialized"),
                                session)
        note.release()
        logger.info("MCP server %s: session opened (protocol %s)", server.name, session.version)
        return session

    async def _sse_request(self, server: McpServer, endpoint: str, method: str,
                           params: dict[str, Any] | None) -> Answer:
        link = await self._link(server, endpoint)
        message, size = await link.ask(rid := next(self._ids), wire.request(rid, method, params))
        if size > _limit(server, method):
            raise McpResultTooLarge(f"MCP server {server.name} answered more than "
                                    f"{_limit(server, method)} bytes")
        return Answer(_result(server, message), size)

    async def _link(self, server: McpServer, endpoint: str) -> SseLink:
        found = self._links.get(server.name)
        if found is not None and found.alive and found.server == server \
                and found.endpoint == endpoint:
            return found
        async with self._opening.setdefault(server.name, asyncio.Lock()):
            found = self._links.get(server.name)
            if found is not None and found.alive and found.server == server \
                    and found.endpoint == endpoint:
                return found
            if found is not None:
                await found.close()
            link = await SseLink.open(self._transport, server, endpoint,
                                      max(server.max_result_bytes, MIN_ANSWER_BYTES) + 65536)
            try:
                rid = next(self._ids)
                message, _ = await link.ask(rid, wire.request(rid, "initialize", {
                    "protocolVersion": wire.VERSIONS[0], "capabilities": {},
                    "clientInfo": CLIENT_INFO}))
                _result(server, message)
                await link.tell(wire.notification("notifications/initialized"))
            except BaseException:
                await link.close()
                raise
            self._links[server.name] = link
            logger.info("MCP server %s: HTTP+SSE session opened", server.name)
            return link

    async def _post(self, server: McpServer, endpoint: str, body: bytes,
                    session: _Session | None) -> Connection:
        headers = {"Accept": ACCEPT, **self._headers_of(server)}
        if session is not None:
            headers[VERSION_HEADER] = session.version
            if session.id is not None:
                headers[SESSION_HEADER] = session.id
        # One Upstream per exchange: the pool is the transport's, keyed by host, not by it.
        up = Upstream(f"mcp:{server.name}", endpoint, headers)
        try:
            return await self._transport.send(up, "", body)
        except UpstreamUnreachable as exc:
            raise UpstreamUnreachable(f"MCP server {server.name} could not be reached") from exc
        except UpstreamError as exc:
            raise UpstreamError(f"MCP server {server.name} failed: {exc.message}") from exc


def _result(server: McpServer, message: dict[str, Any]) -> dict[str, Any]:
    err = message.get("error")
    if err is not None:
        code = err.get("code") if isinstance(err, dict) else None
        code = code if isinstance(code, int) else wire.INTERNAL_ERROR
        raise McpRefused(f"MCP server {server.name} refused the request (JSON-RPC error {code})",
                         code)
    res = message.get("result")
    if not isinstance(res, dict):
        raise UpstreamError(f"MCP server {server.name} answered without a result")
    return res


def _limit(server: McpServer, method: str) -> int:
    """How many bytes an answer to `method` may take: a tool's result, a resource or a prompt
    the server's `max_result_bytes`; a list or the handshake at least MIN_ANSWER_BYTES."""
    return server.max_result_bytes if method in BOUNDED else \
        max(server.max_result_bytes, MIN_ANSWER_BYTES)


async def _answer(server: McpServer, conn: Connection, rid: int, limit: int
                  ) -> tuple[dict[str, Any], int]:
    """The JSON-RPC answer to request `rid` (the body, or the event carrying it) and its size."""
    name = server.name
    if conn.status >= 400:
        raise UpstreamError(f"MCP server {name} answered HTTP {conn.status}")
    kind = conn.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        body = await _bounded(server, conn, limit)
        return _message(name, body), len(body)
    if kind != "text/event-stream":
        raise UpstreamError(f"MCP server {name} answered {kind or 'no content type'}, not MCP")
    buffer, size = bytearray(), 0
    async for chunk in conn.chunks(_ignore, b""):
        size += len(chunk)
        if size > limit:
            raise McpResultTooLarge(f"MCP server {name} answered more than {limit} bytes")
        buffer += chunk
        for _, data in wire.sse_events(buffer):
            msg = _message(name, data)
            # Progress and log notifications (and requests llmgw cannot answer) pass by.
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg, len(data)
    raise UpstreamError(f"MCP server {name}'s event stream ended without an answer")


async def _bounded(server: McpServer, conn: Connection, limit: int) -> bytes:
    data = bytearray()
    async for chunk in conn.chunks(_ignore, b""):
        data += chunk
        if len(data) > limit:
            raise McpResultTooLarge(f"MCP server {server.name} answered more than {limit} bytes")
    if conn.broke():
        raise UpstreamError(f"MCP server {server.name}'s answer broke off")
    return bytes(data)


def _message(name: str, data: bytes) -> dict[str, Any]:
    try:
        msg = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(f"MCP server {name} answered something that is not JSON") from exc
    if not isinstance(msg, dict):
        raise UpstreamError(f"MCP server {name} answered something that is not JSON-RPC")
    return msg


def _ignore(_chunk: bytes) -> None:
    pass
