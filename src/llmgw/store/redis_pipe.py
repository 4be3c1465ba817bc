"""One pipelined connection to the install's Redis, for what every request does there (admit,
settle, take a judge slot).

The redis client's pool costs about 140 µs of CPU a call (a connection taken from the pool
and given back, the command object, its retry wrapper): more than the rest of the request path
together. Here each process keeps one connection; commands are written as they are made, and
replies, parsed by hiredis (the redis client's own C parser), are matched to their callers in
order, which Redis keeps.
Everything else that talks to Redis (cooldowns' pub/sub, reads for `ctl`) uses the redis client.

Every call has a deadline: when the oldest reply awaited is overdue the connection is dropped
and every caller waiting on it gets `SharedStoreDown`; the next call connects afresh (as after a
Redis restart). Scripts are loaded on every new connection before anything is sent on it, so an
EVALSHA never meets a Redis that lost them (a restart empties its script cache).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.connection import parse_url

from llmgw.core.errors import ConfigError, SharedStoreDown

logger = logging.getLogger(__name__)

# After a failed call Redis is left alone this long (see `RedisPipe.pause`).
RETRY_AFTER_FAILURE_S = 1.0

Reply = Any  # bytes, int, a list of replies, None or hiredis.ReplyError, as RESP2 gives them


@dataclass(frozen=True)
class Script:
    """A Lua script, by its SHA1 (what EVALSHA names it by)."""

    source: str

    @functools.cached_property
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, from a `redis://`, `rediss://` or `unix://` URL."""

    host: str
    port: int
    path: str | None  # a unix socket
    db: int
    username: str | None
    password: str | None
    tls: ssl.SSLContext | None

    @classmethod
    def from_url(cls, url: str, password: str | None = None) -> Endpoint:
        """The endpoint `url` names; `password` (from a file or the environment) wins over one
        in the URL."""
        try:
            parts: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise ConfigError(f"[limits] redis_url is not a Redis URL: {exc}") from exc
        tls = None
        if url.startswith("rediss://"):
            tls = ssl.create_default_context(cafile=parts.get("ssl_ca_certs"))
            if str(parts.get("ssl_cert_reqs", "required")).lower() == "none":
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
        return cls(host=parts.get("host", "localhost"), port=int(parts.get("port", 6379)),
                   path=parts.get("path"), db=int(parts.get("db", 0)),
                   username=parts.get("username"), password=password or parts.get("password"),
                   tls=tls)


def _pack(args: tuple[str | bytes | int | float, ...]) -> bytes:
    # hiredis' stub types its argument as a one-element tuple; it takes any number.
    packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
    return packed


# Told a command's reply (a `hiredis.ReplyError` as it is) or the `SharedStoreDown` that ended
# the wait, at once from the connection's read: it must be quick and must not raise.
Handler = Callable[[Reply], None]


def _resolving(future: asyncio.Future[Reply]) -> Handler:
    def handle(reply: Reply) -> None:
        if future.done():
            return
        if isinstance(reply, SharedStoreDown):
            future.set_exception(reply)
        else:
            future.set_result(reply)
    return handle


class _Connection(asyncio.Protocol):
    """Replies in the order of the commands; a handler per command, or none (fire and forget)."""

    def __init__(self, lost: Callable[[_Connection], None],
                 refused: Callable[[hiredis.ReplyError], None]) -> None:
        self._reader = hiredis.Reader()
        self._lost = lost
        self._refused = refused
        self.transport: asyncio.Transport | None = None
        # (the command's handler, when the command was written): in the order of the replies.
        self.awaiting: deque[tuple[Handler | None, float]] = deque()
        self._out: list[bytes] = []  # commands sent without waiting, not yet written
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport here

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError:
                logger.exception("the shared store sent something that is not RESP")
                self.fail(SharedStoreDown("the shared store's reply could not be parsed"))
                return
            if reply is False:
                return
            if not self.awaiting:  # more replies than commands: nothing after this is to be trusted
                self.fail(SharedStoreDown("the shared store sent a reply nobody asked for"))
                return
            handler = self.awaiting.popleft()[0]
            if isinstance(reply, hiredis.ReplyError):
                self._refused(reply)
                if handler is None:
                    logger.warning("the shared store refused a command sent without waiting: %s",
                                   reply)
            if handler is not None:
                handler(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(SharedStoreDown("the connection to the shared store was closed"))

    def write(self, command: bytes, handler: Handler | None, now: float) -> None:
        # A command whose reply is awaited is written at once (measured: a burst's commands
        # reach Redis sooner one by one, it works on the first while the next are made). One
        # sent without waiting (a settlement) waits for the next write or the end of the loop
        # turn, so the settlements of a busy turn cost one syscall, not one each; it still
        # goes before whatever is written after it, so Redis sees the commands in order.
        if handler is not None:
            assert self.transport is not None
            if self._out:
                self._out.append(command)
                command = b"".join(self._out)
                self._out.clear()
            self.transport.write(command)
        else:
            if not self._out:
                asyncio.get_running_loop().call_soon(self._flush)
            self._out.append(command)
        self.awaiting.append((handler, now))

    def _flush(self) -> None:
        if self._out and self.transport is not None and not self.closed:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def fail(self, error: SharedStoreDown) -> None:
        """Drop the connection: every command still awaiting its reply gets `error`."""
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
            self._lost(self)
        while self.awaiting:
            handler = self.awaiting.popleft()[0]
            if handler is not None:
                handler(error)


class RedisPipe:
    """A process's pipelined connection to Redis, made when first needed and again after a
    failure; `timeout_s` bounds every call, connecting included. What uses it pauses it after a
    failure (`pause`, timed by `monotonic`) and skips Redis while it is paused (`usable`)."""

    def __init__(self, endpoint: Endpoint, timeout_s: float, scripts: tuple[Script, ...] = (),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._endpoint = endpoint
        self.timeout_s = timeout_s
        self._monotonic = monotonic
        self._retry_at = 0.0
        self._scripts = scripts
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Future[_Connection]] = set()  # connections being made for `request`

    def usable(self) -> bool:
        """Whether to try Redis now (not within `RETRY_AFTER_FAILURE_S` of a failure)."""
        return self._monotonic() >= self._retry_at

    def pause(self) -> None:
        """Leave Redis alone for a while after a failure: what relies on it falls back at once
        instead of each call waiting out the deadline. One pause for everything this process
        does there (limits and judge slots meet the same outage)."""
        self._retry_at = self._monotonic() + RETRY_AFTER_FAILURE_S

    async def call(self, *args: str | bytes | int | float) -> Reply:
        """Send one command and return its reply; `SharedStoreDown` when Redis refuses it or
        does not answer in time."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.request(_resolving(future), *args)
        reply = await future
        if isinstance(reply, hiredis.ReplyError):
            raise SharedStoreDown(f"the shared store refused {args[0]!s}: {reply}")
        return reply

    def request(self, handler: Handler, *args: str | bytes | int | float) -> None:
        """Send one command; `handler` is told its reply, or the `SharedStoreDown` that ended
        the wait (connecting first, when not connected). For callers that take replies as
        they come, with no task and no future."""
        conn = self._conn
        if conn is not None:
            self._write(conn, _pack(args), handler, asyncio.get_running_loop().time())
            return
        task = asyncio.ensure_future(self._connect())
        self._tasks.add(task)

        def connected(task: asyncio.Future[_Connection]) -> None:
            self._tasks.discard(task)
            if task.cancelled():
                handler(SharedStoreDown("connecting to the shared store was cancelled"))
            elif isinstance(error := task.exception(), SharedStoreDown):
                handler(error)
            elif error is not None:
                handler(SharedStoreDown(f"cannot connect to the shared store: {error!r}"))
            else:
                self._write(task.result(), _pack(args), handler, asyncio.get_running_loop().time())
        task.add_done_callback(connected)

    def send(self, *args: str | bytes | int | float) -> bool:
        """Send one command without waiting for its reply; False (nothing sent) while not
        connected."""
        conn = self._conn
        if conn is None:
            return False
        self._write(conn, _pack(args), None, asyncio.get_running_loop().time())
        return True

    def _write(self, conn: _Connection, command: bytes, handler: Handler | None,
               now: float) -> None:
        conn.write(command, handler, now)
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().call_at(now + self.timeout_s, self._check)

    def _check(self) -> None:
        """Drop a connection whose oldest awaited reply is overdue; else look again when the
        oldest one falls due. One timer for every call, not one each."""
        self._watchdog = None
        conn = self._conn
        if conn is None or not conn.awaiting:
            return
        loop = asyncio.get_running_loop()
        due = conn.awaiting[0][1] + self.timeout_s
        if loop.time() >= due:
            conn.fail(SharedStoreDown(f"the shared store did not answer within "
                                      f"{self.timeout_s * 1000:.0f} ms"))
        else:
            self._watchdog = loop.call_at(due, self._check)

    def _refused(self, error: hiredis.ReplyError) -> None:
        # A script gone from Redis' cache while connected (SCRIPT FLUSH): loaded again, so only
        # the calls already sent fail.
        if str(error).startswith("NOSCRIPT"):
            for script in self._scripts:
                self.send("SCRIPT", "LOAD", script.source)

    def _lost(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None

    async def _connect(self) -> _Connection:
        # Callers that come while a connection is being made wait for that one.
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._opened)
        return await asyncio.shield(self._connecting)

    def _opened(self, connecting: asyncio.Future[_Connection]) -> None:
        self._connecting = None
        if not connecting.cancelled():
            connecting.exception()  # seen here, should every caller have given up waiting

    async def _open(self) -> _Connection:
        e = self._endpoint
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                if e.path is not None:
                    transport, conn = await loop.create_unix_connection(
                        lambda: _Connection(self._lost, self._refused), e.path, ssl=e.tls)
                else:
                    transport, conn = await loop.create_connection(
                        lambda: _Connection(self._lost, self._refused), e.host, e.port, ssl=e.tls)
                # uvloop may call connection_made a loop turn after this returns.
                conn.connection_made(transport)
                hello: list[tuple[Any, ...]] = []
                if e.password is not None:
                    hello.append(("AUTH", e.username, e.password) if e.username
                                 else ("AUTH", e.password))
                if e.db:
                    hello.append(("SELECT", e.db))
                hello += [("SCRIPT", "LOAD", s.source) for s in self._scripts]
                futures = []
                for args in hello:
                    future: asyncio.Future[Reply] = loop.create_future()
                    conn.write(_pack(args), _resolving(future), loop.time())
                    futures.append(future)
                for args, reply in zip(hello, await asyncio.gather(*futures), strict=True):
                    if isinstance(reply, hiredis.ReplyError):
                        # Named by the command alone: AUTH's arguments are the credentials.
                        error = SharedStoreDown(f"the shared store refused {args[0]}: {reply}")
                        conn.fail(error)
                        raise error
        except (TimeoutError, OSError) as exc:
            raise SharedStoreDown(f"cannot connect to the shared store: {exc or 'timed out'}") from exc
        self._conn = conn
        return conn

    def close(self) -> None:
        """Drop the connection (replies still awaited fail) and stop connecting."""
        for connecting in (*self._tasks, self._connecting):
            if connecting is not None:
                connecting.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._conn is not None:
            self._conn.fail(SharedStoreDown("the shared store's connection was closed"))
