"""The HTTP edge under the app: what aiohttp answers before any route runs.

aiohttp's connection handler answers parser errors itself, as plain text quoting the bytes it
could not parse (an `Authorization` header included) and logs them with a traceback. It also has
no deadline for a request's headers and no bound on connections per client. `EdgeRunner` serves
the app through `EdgeHandler`, its subclass that answers parser errors in OpenAI's shape, closes
connections whose headers do not arrive in time, and refuses connections past a per-client bound.
Given `HotRoutes` (an app with a data plane), its connections are llmgw's own instead
(`api.hot_edge`), which answer the generation routes themselves, keep the same bounds, and hand
every other request to an `EdgeHandler`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong

from llmgw.api.context import SERVER

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EdgeLimits:
    """How long a client may take and how many connections it may hold."""

    # From connect (or a request's first byte) to the end of its headers.
    header_timeout_s: float = 10.0
    # An idle keep-alive connection is closed after this long.
    keepalive_timeout_s: float = 75.0
    # Open connections per client address; 0 for no bound.
    max_per_client: int = 256
    # At shutdown, requests in flight get this long to finish before they are cancelled.
    drain_timeout_s: float = 30.0


class Connections:
    """Open connections per client address, shared by one server's connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}
        self._refusing: set[str] = set()

    def admit(self, peer: str) -> bool:
        """Count a new connection from `peer`; False (and it is not counted) past the bound."""
        held = self._open.get(peer, 0)
        if self.limit and held >= self.limit:
            if peer not in self._refusing:  # one line per episode, not one per connection
                self._refusing.add(peer)
                logger.warning("refusing connections from %s: it holds %d, the most allowed",
                               peer, held)
            return False
        self._open[peer] = held + 1
        return True

    def release(self, peer: str) -> None:
        """A connection `admit` counted has closed."""
        held = self._open.get(peer, 0) - 1
        if held > 0:
            self._open[peer] = held
        else:
            self._open.pop(peer, None)
        if self.limit and held < self.limit:
            self._refusing.discard(peer)

    def held(self, peer: str) -> int:
        return self._open.get(peer, 0)


def error_body_bytes(message: str, type_: str, code: str) -> bytes:
    """An error in OpenAI's shape, for what the edge answers before llmgw's errors exist."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


@dataclass(frozen=True)
class EdgeCode:
    """An error code the edge answers with itself, always in OpenAI's shape."""

    status: int
    type: str
    retryable: bool | None  # None: it depends on what failed
    when: str


# The codes above llmgw's own errors (core.errors): the error codes reference lists them from
# here, and its test finds every code the edge sets.
EDGE_CODES: dict[str, EdgeCode] = {
    "invalid_request": EdgeCode(
        400, "invalid_request_error", False,
        "The HTTP request itself is malformed (its framing, a protocol upgrade, a body whose "
        "transfer or content encoding is broken). Nothing of it is quoted back, and the "
        "connection is closed."),
    "header_too_large": EdgeCode(
        431, "invalid_request_error", False,
        "The request's header fields are too large or too many; the connection is closed."),
    "too_many_connections": EdgeCode(
        503, "server_error", True,
        "The client's address already holds `max_connections_per_client` connections: the new "
        "one is answered at once (with `Retry-After: 1`) and closed."),
    "internal_error": EdgeCode(
        500, "server_error", None,
        "A fault escaped llmgw's own error handling (a generation route's handler, or the HTTP "
        "server around the app); the server's log says what. Inside the app's routes the same "
        "fault is a 500 with no code."),
    "timeout": EdgeCode(
        504, "server_error", True,
        "A timeout escaped the app's own handling and the HTTP server answered it."),
}


BUSY_BODY = error_body_bytes("Too many connections from this address; close some and retry",
                             "server_error", "too_many_connections")
# Written before the request is parsed (there may never be one), so it is a fixed byte string.
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\nServer: %s\r\n\r\n%s"
        % (len(BUSY_BODY), SERVER.encode(), BUSY_BODY))


def refusal(exc: BaseException | None) -> tuple[int, str, str]:
    """Status, message and code for a request the HTTP parser refused; never its bytes."""
    if isinstance(exc, LineTooLong) or (
        isinstance(exc, BadHttpMessage) and "too many headers" in exc.message.lower()
    ):
        return 431, "Request header fields are too large or too many", "header_too_large"
    return 400, "Malformed HTTP request", "invalid_request"


def peer_of(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple | list) and peer:
        return str(peer[0])
    return str(peer or "")


class Framing:
    """Where the requests a client sends end, by llhttp (the parser inside aiohttp's too).

    aiohttp parses a read whole: when bytes it refuses follow whole requests in the same read,
    it drops those requests and answers only the refusal. Told where they end (`split`), the
    handler gives it the requests and the rest apart, so it answers them in the order sent."""

    __slots__ = ("_parser", "_begun", "_ended")

    def __init__(self) -> None:
        self._begun = self._ended = 0
        self._parser = httptools.HttpRequestParser(self)

    def on_message_begin(self) -> None:
        self._begun += 1

    def on_message_complete(self) -> None:
        self._ended += 1

    def split(self, data: bytes) -> int | None:
        """Read `data`, the connection's next bytes: where in it the whole requests end that bytes
        the parser refuses follow; None when nothing in it is refused, or no request before that
        began in it (a request begun in an earlier read is answered as aiohttp answers it)."""
        between = self._begun == self._ended
        ended = self._ended
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            whole = self._ended - ended
            return _end_of(data, whole) if between and whole else None
        return None


def _end_of(data: bytes, requests: int) -> int:
    """Where the first `requests` requests of `data` end: the shortest start of it that holds
    them all (found by halves: the error path only)."""
    low, high = 0, len(data)
    while low < high:
        middle = (low + high) // 2
        counted = Framing()
        try:
            counted._parser.feed_data(data[:middle])
        except httptools.HttpParserError:
            pass
        if counted._ended >= requests:
            high = middle
        else:
            low = middle + 1
    return low


class EdgeHandler(web.RequestHandler):
    """aiohttp's connection handler with the edge's answers and bounds."""

    __slots__ = ("_connections", "_header_timeout_s", "_peer", "_deadline", "_armed_at", "_busy",
                 "_framing")

    def __init__(self, manager: web.Server, connections: Connections, header_timeout_s: float,
                 framing: bool = True, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._connections = connections
        self._header_timeout_s = header_timeout_s
        self._peer: str | None = None  # set once the connection is counted
        self._deadline: asyncio.TimerHandle | None = None
        self._armed_at = 0
        self._busy = False
        # A client's own connection; a hot connection hands its handler whole requests only.
        self._framing = Framing() if framing else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = peer_of(transport)
        if not peer:
            pass  # the private Unix socket: this server's own workers, each bounded itself
        elif self._connections.admit(peer):
            self._peer = peer
        else:
            # Answered on its first bytes, so the client reads a 503 rather than a reset.
            self._busy = True
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        if self._peer is not None:
            self._connections.release(self._peer)
            self._peer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._busy:
            if data and self.transport is not None:
                self.transport.write(BUSY)
                self.force_close()
            return
        if self._deadline is None and data and self._awaiting_request():
            self._arm()  # the first bytes of a request on a kept-alive connection
        if self._framing is not None:
            try:
                cut = self._framing.split(data)
            except httptools.HttpParserUpgrade:
                cut = None
                self._framing = None  # what follows an upgrade is not HTTP: aiohttp's alone
            if cut is not None:
                # The requests first (aiohttp answers them), then the refused bytes (its 400).
                self._framing = None
                super().data_received(data[:cut])
                data = data[cut:]
        super().data_received(data)
        if self._deadline is not None and self._request_count != self._armed_at:
            self._disarm()  # a whole request's headers came in time

    def _awaiting_request(self) -> bool:
        # aiohttp's own keep-alive check: its connection loop waits on `_waiter` for the next
        # request's headers, and on nothing while a request is handled.
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _arm(self) -> None:
        self._armed_at = self._request_count
        self._deadline = self._loop.call_later(self._header_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        # No request parsed since the deadline was set, so none is being handled: the client
        # holds the connection without asking anything.
        if self._request_count == self._armed_at and self.transport is not None:
            logger.debug("closed a connection from %s: no request headers within %gs",
                         peer_of(self.transport), self._header_timeout_s)
            self.force_close()

    async def shutdown(self, timeout: float | None = 15.0) -> None:
        """At shutdown: the request in flight gets `timeout` to finish, then it is cancelled.
        (aiohttp waits `timeout`, then up to `timeout` again for the request to notice it
        should stop, which a request waiting on an upstream never does.)"""
        if timeout is None:
            await super().shutdown(None)
            return
        try:
            async with asyncio.timeout(timeout):
                await super().shutdown(timeout)
        except TimeoutError:
            if self._task_handler is not None:
                self._task_handler.cancel()
            self.force_close()

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, web.RequestPayloadError | HttpProcessingError):
            # A broken body found while aiohttp drains it after the answer: the client's error,
            # and its message may quote the body.
            logger.info("dropped a connection with a malformed request body: %s",
                        type(exc).__name__)
            return
        super().log_exception(*args, **kwargs)

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
        """Parser errors (and faults that escaped the app) as OpenAI-shaped errors; the log line
        names the kind of error, never the bytes (which may hold a key)."""
        if request.writer.output_size > 0:
            raise ConnectionError("the response had started; the connection is closed instead")
        if status >= 500:
            if status == 504:
                text, type_, code = "The request timed out", "server_error", "timeout"
            else:
                logger.error("unhandled error answering %s", request.remote, exc_info=exc)
                text, type_, code = "Internal server error", "server_error", "internal_error"
        else:
            status, text, code = refusal(exc)
            type_ = "invalid_request_error"
            logger.info("refused a malformed request from %s: %s (%d)", request.remote,
                        type(exc).__name__ if exc is not None else "parser error", status)
        resp = web.Response(body=error_body_bytes(text, type_, code), status=status,
                            content_type="application/json", headers={"Server": SERVER})
        resp.force_close()
        return resp


class _EdgeServer(web.Server):
    """aiohttp's server (the connection factory) making EdgeHandlers, or, for an app with a
    data plane, llmgw's own connections that hand EdgeHandlers what is not theirs."""

    def __init__(self, base: web.Server, connections: Connections, limits: EdgeLimits,
                 hot: HotRoutes | None) -> None:
        # The handler settings aiohttp gathered for its own handlers (access log, keep-alive,
        # header sizes), reused as they are.
        self._handler_kwargs: dict[str, Any] = dict(base._kwargs)
        super().__init__(base.request_handler, request_factory=base.request_factory,
                         handler_cancellation=base.handler_cancellation)
        self._per_client = connections
        self._limits = limits
        self._hot = hot
        # A handed-over request's connection is counted (and bounded) by its hot connection.
        self._uncounted = Connections(0)

    def __call__(self) -> Any:
        if self._hot is not None:
            return self._hot(self, self._inner, self._per_client, self._limits)
        return EdgeHandler(self, self._per_client, self._limits.header_timeout_s,
                           loop=asyncio.get_running_loop(), **self._handler_kwargs)

    def _inner(self) -> web.RequestHandler:
        return EdgeHandler(self, self._uncounted, self._limits.header_timeout_s, framing=False,
                           loop=asyncio.get_running_loop(), **self._handler_kwargs)


# Makes a connection serving an app's hot routes itself: given the server, a maker of aiohttp
# handlers for the rest, the per-client count and the edge's bounds (`api.hot_edge`).
HotRoutes = Callable[[web.Server, Callable[[], web.RequestHandler], Connections, EdgeLimits], Any]


class EdgeRunner(web.AppRunner):
    """An AppRunner whose connections are EdgeHandlers; requests in flight at shutdown get
    `drain_timeout_s`."""

    def __init__(self, app: web.Application, limits: EdgeLimits, hot: HotRoutes | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("access_log", None)
        super().__init__(app, handle_signals=False, keepalive_timeout=limits.keepalive_timeout_s,
                         shutdown_timeout=limits.drain_timeout_s, **kwargs)
        self.limits = limits
        self.connections = Connections(limits.max_per_client)
        self._hot = hot

    async def _make_server(self) -> web.Server:
        base = await super()._make_server()
        return _EdgeServer(base, self.connections, self.limits, self._hot)
