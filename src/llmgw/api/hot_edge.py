"""The data plane's hot routes on a connection protocol of llmgw's own.

aiohttp's server costs about 230 µs of CPU and 0.2-0.3 ms of latency per request before any of
llmgw's code runs. `HotConnection` owns every connection of the public port instead: it parses
with httptools (llhttp, the parser aiohttp's C extension wraps too) and answers the generation
routes itself (`POST` to `HOT`: auth, body checks, `Gateway.forward`, the reply written straight
to the socket). Every other request on the connection (admin, console, `/metrics`, anything
unusual on a hot path: `Expect`, a compressed or chunked body, tracing on) is handed, re-serialised
from what was parsed, to an aiohttp connection handler made for it (`api.hot_handover`), which
answers it as before. Once a connection has handed one request over it hands over all the rest
too, so answers never overtake each other.

It keeps the edge's promises (`api/edge.py`): the header deadline, the per-client connection
bound, parser errors in OpenAI's shape and never quoting the request, drain at shutdown (it
registers with aiohttp's server like aiohttp's handlers do), request ids, a client that leaves
cancelling its request, and back-pressure on streams.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools
from aiohttp import web

from llmgw.api import hot_reply as out
from llmgw.api.body import BODY_TIMEOUT_S
from llmgw.api.edge import BUSY, Connections, EdgeLimits, HotRoutes, peer_of
from llmgw.api.handler import Head, answer, refusal
from llmgw.api.hot_handover import HandOver
from llmgw.api.request_ids import CURRENT_ID, new_id
from llmgw.core.deadline import Deadline
from llmgw.core.errors import PayloadTooLarge
from llmgw.gateway.service import Gateway
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.dialect import Api

logger = logging.getLogger(__name__)

HOT: dict[bytes, Api] = {spec.path.encode(): api for api, spec in APIS.items() if spec.hot}
# The hot routes whose callers speak Anthropic's dialect (`errors.speaks_anthropic`).
_ANTHROPIC = frozenset(api for api in HOT.values() if APIS[api].anthropic)
# A hot request carrying one of these is aiohttp's to answer: rare, and aiohttp handles them.
_HANDED_OVER = frozenset({b"expect", b"content-encoding", b"transfer-encoding", b"upgrade"})
# aiohttp's own bounds on a request's head, kept: past them, 431.
MAX_HEADERS = 128
MAX_LINE = 8190
# Requests a client may send ahead of their answers on one connection before it is read no
# further.
MAX_PIPELINED = 16
MAX_HEAD_BYTES = 8190 * 4


class _Request:
    """One hot request, parsed whole."""

    __slots__ = ("api", "path", "headers", "body", "keep_alive", "too_large")

    def __init__(self, api: Api, path: bytes, headers: dict[bytes, bytes]) -> None:
        self.api, self.path, self.headers = api, path, headers
        self.body: list[bytes] = []
        self.keep_alive = True
        self.too_large = False


class HotConnection(asyncio.Protocol):
    """One client connection of the public port (see the module's docstring)."""

    def __init__(self, manager: web.Server, gateway: Gateway,
                 inner: Callable[[], web.RequestHandler], connections: Connections,
                 limits: EdgeLimits, max_body: int) -> None:
        self._manager = manager
        self._gw = gateway
        self._make_inner = inner
        self._connections = connections
        self._limits = limits
        self._max_body = max_body
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._peer: str | None = None
        self._busy = False
        # One timer per connection for the head's, the body's and the idle deadline: a request
        # moves it (three timers a request cost more than the parsing).
        self._deadline = Deadline(self._expire)
        self._awaiting_head = True  # between requests: the next bytes start a head
        self._in_head = False  # a head has begun and not ended (its deadline runs)
        self._body_began = False  # a hot request's head ended in the bytes being read
        self._closing = False
        self._keep_alive = True  # of the request being answered
        self._paused = False  # reading, while a client has pipelined too many requests
        # The parser's refusal of what came after requests still to be answered: written (and
        # the connection closed) once they are.
        self._refusal: bytes | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        # The request being parsed.
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._current: _Request | None = None
        self._received = 0
        # Requests parsed whole, answered one at a time in order.
        self._queue: deque[_Request] = deque()
        self._task_handler: asyncio.Task[None] | None = None  # aiohttp's server reads this name
        # aiohttp's handler, from the first request handed to it on; while None (every hot
        # request's case) each check of it is one attribute.
        self._handover: HandOver | None = None

    # --- the connection ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport's subclasses, but are its kind).
        self.transport = cast(asyncio.Transport, transport)
        self._manager.connection_made(self, self.transport)  # type: ignore[arg-type]
        peer = peer_of(transport)
        if not peer:
            pass  # the private Unix socket: this server's own workers
        elif self._connections.admit(peer):
            self._peer = peer
        else:
            self._busy = True  # answered on its first bytes, so the client reads a 503
        self._arm(self._limits.header_timeout_s)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._deadline.cancel()
        if self._peer is not None:
            self._connections.release(self._peer)
            self._peer = None
        self._writable.set()  # a writer waiting to drain wakes and finds the connection gone
        if self._task_handler is not None:
            self._task_handler.cancel()  # the client left: its request stops
        if self._handover is not None:
            self._handover.connection_lost(exc)
        self._manager.connection_lost(self, exc)  # type: ignore[arg-type]
        self.transport = None

    def pause_writing(self) -> None:
        self._writable.clear()
        if self._handover is not None:
            self._handover.pause_writing()

    def resume_writing(self) -> None:
        self._writable.set()
        if self._handover is not None:
            self._handover.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self._busy:
            if self.transport is not None:
                self.transport.write(BUSY)
                self.transport.close()
            return
        began = self._awaiting_head  # a request's first bytes: its head's deadline starts
        if began:
            self._awaiting_head, self._in_head = False, True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "Protocol upgrades are not served here", "invalid_request", "upgrade")
            return
        except httptools.HttpParserError as exc:
            # A callback's own refusal (a head too large) is already answered.
            self._refuse(400, "Malformed HTTP request", "invalid_request", type(exc).__name__)
            return
        # A deadline is armed only for a head or a body these bytes left unfinished: most
        # requests come whole in one read and need neither.
        if self._in_head:
            if began:
                self._arm(self._limits.header_timeout_s)
        elif self._body_began:
            self._body_began = False
            if self._current is not None:
                # A client that sends its body slower than this holds a connection, never a
                # worker.
                self._arm(BODY_TIMEOUT_S)

    def eof_received(self) -> bool | None:
        return None  # close when the client half-closes: it asks nothing more

    # --- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_bytes = b"", [], 0
        self._current, self._received = None, 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._too_big_head()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        self._head_bytes += len(name) + len(value)
        if (self._head_bytes > MAX_HEAD_BYTES or len(self._headers) > MAX_HEADERS
                or len(name) + len(value) > MAX_LINE):
            self._too_big_head()

    def on_headers_complete(self) -> None:
        self._deadline.disarm()
        self._in_head = False
        path = self._url.partition(b"?")[0]
        api = HOT.get(path) if self._handover is None else None
        headers: dict[bytes, bytes] = {}
        for name, value in self._headers:
            headers.setdefault(name.lower(), value)  # the first of a repeated one, as aiohttp reads
        if (api is None or self._parser.get_method() != b"POST" or self._gw.tracer.enabled
                or not _HANDED_OVER.isdisjoint(headers)
                or self._parser.get_http_version() != "1.1"):  # 1.0 has no chunked answers
            self._hand_over_head(headers)
            return
        request = _Request(api, path, headers)
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            request.too_large = True
        self._current = request
        self._body_began = True

    def on_body(self, body: bytes) -> None:
        request = self._current
        if request is None:
            if self._handover is not None:
                self._handover.body(body, self._task_handler is not None)
            return
        self._received += len(body)
        if self._received > self._max_body:
            request.too_large = True
            request.body.clear()  # what is past the bound is not kept
        elif not request.too_large:
            request.body.append(body)

    def on_message_complete(self) -> None:
        self._awaiting_head = True
        request = self._current
        if request is None:
            if self._handover is not None:
                self._handover.end(self._task_handler is not None)
            return
        self._current = None
        self._deadline.disarm()
        request.keep_alive = self._parser.should_keep_alive()
        self._queue.append(request)
        if self._task_handler is None:
            self._next()
        elif len(self._queue) >= MAX_PIPELINED and self.transport is not None:
            self.transport.pause_reading()  # until the client reads its answers
            self._paused = True

    # --- answering -----------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the next parsed request, or wait for one."""
        if self._queue:
            # Reading goes on while a request is answered: that is how a client leaving is seen
            # (and its request cancelled). What a client pipelines waits here, a few at most.
            request = self._queue.popleft()
            if self._paused and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            self._task_handler = self._loop.create_task(self._serve(request))
            return
        self._task_handler = None
        if self._handover is not None and self._handover.held:
            self._handover.release()
            if self._refusal is not None:
                self._end_refused(self._refusal)
        elif self._refusal is not None:
            self._end_refused(self._refusal)
        elif self._closing and self.transport is not None:
            self.transport.close()
        elif self._handover is None and self._awaiting_head:
            self._arm(self._limits.keepalive_timeout_s)

    async def _serve(self, request: _Request) -> None:
        """Answer `request`, then go on to the next (in this task's last step rather than in a
        done callback: one turn of the loop less per request). One coroutine for all of it:
        each frame between the task and the upstream costs every request's way there and back."""
        try:
            self._keep_alive = request.keep_alive
            headers = request.headers
            rid = new_id(headers.get(b"x-request-id", b"").decode("latin-1"))
            CURRENT_ID.set(rid)
            started = time.monotonic()
            api = request.api
            # Every hot route is under /v1/: Anthropic's are its own, the rest say so by header.
            anthropic = api in _ANTHROPIC or b"anthropic-version" in headers
            head = Head(api, request.path.decode(), _text(headers.get(b"authorization")),
                        _text(headers.get(b"x-api-key")), anthropic, rid, started,
                        _text(headers.get(b"cache-control")), _text(headers.get(b"x-llmgw-cache")),
                        _text(headers.get(b"x-llmgw-session")))
            if request.too_large:  # the bound is the edge's: the body was never kept
                reply = refusal(PayloadTooLarge("request body is too large"), head)
            else:
                reply = await answer(self._gw, head, b"".join(request.body))
            if reply.stream is None:
                self._put(out.whole(reply.status, reply.body, reply.content_type.encode(), rid,
                                    self._keep_alive, out.extra(reply)))
            elif not out.write_settled(self._write, reply, rid, self._keep_alive):
                await out.write_stream(self._write, self._writable, reply, rid, self._keep_alive)
        except BaseException:  # cancelled: the client left, or shutdown gave up waiting
            if self.transport is not None:
                self.transport.close()
            raise
        if self.transport is None:
            return
        if not self._keep_alive:
            self.transport.close()
            return
        self._next()

    def _put(self, data: bytes) -> None:
        """Write a whole answer, if the client is still there to read it."""
        if self.transport is not None:
            self.transport.write(data)

    def _write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("the client went away")
        self.transport.write(data)

    # --- handing over to aiohttp, refusing, timers, shutdown -----------------------------

    def _hand_over_head(self, headers: dict[bytes, bytes]) -> None:
        """Give this request (and every later one on the connection) to aiohttp."""
        if self._handover is None:
            assert self.transport is not None
            self._handover = HandOver(self._make_inner(), self.transport)
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        self._handover.head(self._parser.get_method(), self._parser.get_http_version(), self._url,
                            self._headers, chunked, self._task_handler is not None)

    def _too_big_head(self) -> None:
        self._refuse(431, "Request header fields are too large or too many", "header_too_large",
                     "head too large")
        raise ValueError("head too large")  # stops the parser

    def _refuse(self, status: int, message: str, code: str, why: str) -> None:
        """Answer a request the parser refused, never quoting it (the log names the kind of
        error, never the bytes, which may hold a key), and close: after the answers owed to
        the requests before it, so a client reads them in the order it asked."""
        if self.transport is None or self.transport.is_closing() or self._refusal is not None:
            return
        logger.info("refused a malformed request from %s: %s (%d)", self._peer or "a worker",
                    why, status)
        refusal = out.malformed(status, message, code)
        if self._task_handler is None:
            self._end_refused(refusal)
            return
        # Nothing after the refused bytes is read: the parser cannot go on past them.
        self._refusal = refusal
        self._paused = False
        self.transport.pause_reading()

    def _end_refused(self, refusal: bytes) -> None:
        """The parser's refusal, once every request before it is answered; then the end."""
        if self._handover is not None and not self._handover.idle:
            # aiohttp answers what it was handed, then closes: the refusal is that close.
            self._handover.close()
        elif self.transport is not None:
            self.transport.write(refusal)
            self.transport.close()

    def _arm(self, seconds: float) -> None:
        self._deadline.arm(self._loop, self._loop.time() + seconds)

    def _expire(self) -> None:
        if self.transport is not None and (
                self._in_head or (self._task_handler is None and self._handover is None)):
            self.transport.close()  # no request, or not all of its head or body, in time

    def close(self) -> None:
        """Stop after the request in flight (aiohttp's server calls this first at shutdown)."""
        self._closing = True
        if self._handover is not None:
            self._handover.close()
        elif self._task_handler is None and self.transport is not None:
            self.transport.close()

    async def shutdown(self, timeout: float | None = None) -> None:
        """At shutdown: the request in flight gets `timeout` to finish, then it is cancelled."""
        self.close()
        task = self._task_handler
        if task is not None:
            await asyncio.wait({task}, timeout=timeout)
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        if self._handover is None and self.transport is not None:
            self.transport.close()  # (a handed-over connection is its aiohttp handler's to close)


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


def hot_routes(gateway: Gateway, max_body: int) -> HotRoutes:
    """What `EdgeRunner` needs to serve an app's hot routes on `HotConnection`s."""

    def make(manager: web.Server, inner: Callable[[], web.RequestHandler],
             connections: Connections, limits: EdgeLimits) -> HotConnection:
        return HotConnection(manager, gateway, inner, connections, limits, max_body)

    return make
