"""The older HTTP+SSE transport (MCP 2024-11-05), towards an upstream that still speaks it.

The client holds a GET open on the server's URL; the server's first event (`endpoint`) names
where messages are POSTed, and every answer comes back as an event on that stream. Here one such
link per server per process: a task reads the stream and hands each answer to the request
waiting for its id. The message URL must be on the server's own origin: a server cannot send
llmgw's calls, and its credential, anywhere else. A link whose stream ends fails what waits on
it, and the next request opens another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urljoin, urlsplit

import orjson

from llmgw.core.errors import McpResultTooLarge, UpstreamError
from llmgw.core.mcp import McpServer
from llmgw.gateway.mcp import wire
from llmgw.gateway.mcp.credentials import credential_header
from llmgw.gateway.transport import Connection, Transport
from llmgw.gateway.upstream.table import Upstream

logger = logging.getLogger(__name__)

# Bytes of the stream held before its first event: an `endpoint` event is a line.
MAX_FIRST_EVENT = 64 * 1024


class SseLink:
    """One HTTP+SSE session with one server."""

    def __init__(self, transport: Transport, server: McpServer, endpoint: str, conn: Connection,
                 origin: str, target: str, limit: int) -> None:
        self._transport = transport
        self.server = server
        self.endpoint = endpoint
        self._conn = conn
        self._origin, self._target = origin, target  # where messages go: origin + path?query
        self._limit = limit
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], int]]] = {}
        self._buffer = bytearray()
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    @classmethod
    async def open(cls, transport: Transport, server: McpServer, endpoint: str, limit: int
                   ) -> SseLink:
        """A link to `server` at `endpoint`, its stream open and read."""
        up = Upstream(f"mcp:{server.name}", endpoint,
                      {**credential_header(server), "Accept": "text/event-stream"})
        conn = await transport.send(up, "", b"", method="GET")
        try:
            if conn.status != 200 or not conn.streams():
                raise UpstreamError(f"MCP server {server.name} answered no event stream "
                                    f"(HTTP {conn.status})")
            buffer, target = bytearray(), None
            async for chunk in conn.chunks(lambda _c: None, b""):
                buffer += chunk
                if len(buffer) > MAX_FIRST_EVENT:
                    break
                events = wire.sse_events(buffer)
                if events:
                    name, data = events[0]
                    target = data.decode("utf-8", "replace") if name == b"endpoint" else None
                    break
            if target is None:
                raise UpstreamError(f"MCP server {server.name} named no endpoint for messages")
            origin, path = _same_origin(server, endpoint, target)
        except BaseException:
            conn.release()
            raise
        link = cls(transport, server, endpoint, conn, origin, path, limit)
        link._buffer = buffer
        link._task = asyncio.create_task(link._read(), name=f"mcp-sse-{server.name}")
        return link

    async def ask(self, rid: int, body: bytes) -> tuple[dict[str, Any], int]:
        """The answer to request `rid` (its message and size)."""
        waiting: asyncio.Future[tuple[dict[str, Any], int]] = \
            asyncio.get_running_loop().create_future()
        self._pending[rid] = waiting
        try:
            await self.tell(body)
            return await waiting
        finally:
            self._pending.pop(rid, None)

    async def tell(self, body: bytes) -> None:
        """POST one message; its answer, if any, comes on the stream."""
        # The credential read for each message, as for streamable HTTP's.
        up = Upstream(f"mcp:{self.server.name}", self._origin, credential_header(self.server))
        conn = await self._transport.send(up, self._target, body)
        status = conn.status
        conn.release()
        if status >= 400:
            raise UpstreamError(f"MCP server {self.server.name} answered HTTP {status}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self) -> None:
        why: UpstreamError = UpstreamError(f"MCP server {self.server.name}'s stream ended")
        try:
            self._deliver()
            async for chunk in self._conn.chunks(lambda _c: None, b""):
                self._buffer += chunk
                if len(self._buffer) > self._limit:
                    why = McpResultTooLarge(f"MCP server {self.server.name} answered more than "
                                         f"{self._limit} bytes")
                    break
                self._deliver()
        finally:
            self._conn.release()
            for waiting in self._pending.values():
                if not waiting.done():
                    waiting.set_exception(why)

    def _deliver(self) -> None:
        for name, data in wire.sse_events(self._buffer):
            if name != b"message":
                continue
            try:
                msg = orjson.loads(data)
            except orjson.JSONDecodeError:
                logger.warning("MCP server %s sent an event that is not JSON", self.server.name)
                continue
            rid = msg.get("id") if isinstance(msg, dict) else None
            waiting = self._pending.get(rid) if isinstance(rid, int) else None
            if waiting is not None and not waiting.done() and ("result" in msg or "error" in msg):
                waiting.set_result((msg, len(data)))


def _same_origin(server: McpServer, endpoint: str, target: str) -> tuple[str, str]:
    """(origin, path and query) of the message URL the server named, when it is on the
    endpoint's own origin."""
    base, url = urlsplit(endpoint), urlsplit(urljoin(endpoint, target))
    if (url.scheme, url.hostname, url.port) != (base.scheme, base.hostname, base.port):
        raise UpstreamError(f"MCP server {server.name} named an endpoint on another origin")
    return f"{url.scheme}://{url.netloc}", url.path + (f"?{url.query}" if url.query else "")
