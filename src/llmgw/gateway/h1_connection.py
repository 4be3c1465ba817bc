"""One upstream connection of llmgw's HTTP/1.1 client (`gateway.h1`) and the answer it reads."""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Protocol, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from llmgw.core.deadline import Deadline


@dataclass(frozen=True)
class Target:
    """Where a base URL points: the pool's key, and the path every request starts with."""

    tls: bool
    host: str
    port: int
    prefix: str
    host_header: str
    # `Basic …` from credentials in the URL (`https://user:pass@host/v1`), sent unless the
    # request has its own Authorization.
    basic_auth: str | None = None

    def __hash__(self) -> int:
        # Made once per base URL (`target` caches it) and hashed three times a request (the
        # request head's cache, taking and giving back a pooled connection): not field by field.
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.tls, self.host, self.port, self.prefix, self.basic_auth))
            object.__setattr__(self, "_hash", cached)
        return cached


# Past this many bytes buffered and unread, the socket is not read until the reader catches up.
_HIGH_WATER = 1 << 20
_LOW_WATER = 1 << 18


class H1Error(Exception):
    """The connection failed, timed out at connect, or the upstream spoke broken HTTP."""


class ConnectError(H1Error):
    """No connection could be made: nothing was sent."""


class Response:
    """An answer whose head arrived; its body is read with `readany`/`read`, and `release`
    gives the connection back (pooled only when the body was read to its end)."""

    def __init__(self, proto: Proto, loop: asyncio.AbstractEventLoop) -> None:
        self._proto = proto
        self._loop = loop
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._headers: CIMultiDictProxy[str] | None = None
        self.status = 0
        # The few headers the data plane reads on every answer, read as they are parsed; the
        # rest are decoded only when asked for (`headers`).
        self.content_type: str | None = None
        self.content_encoding = ""
        self._head: asyncio.Future[None] = loop.create_future()
        self._chunks: deque[bytes] = deque()
        self._rest = b""
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self._exc: BaseException | None = None
        self._paused = False
        self._decoder: _Decoder | None = None
        self._until_close = False  # no length, not chunked: the body ends when the socket does
        self.complete = False
        self.keep_alive = False
        self.got_bytes = False
        self._released = False

    # --- fed by the protocol ---

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """The answer's headers (decoded when first asked for: most answers never are)."""
        if self._headers is None:
            self._headers = CIMultiDictProxy(CIMultiDict(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in self._raw_headers))
        return self._headers

    def _headers_done(self, status: int) -> None:
        self.status = status
        length = chunked = False
        for name, value in self._raw_headers:
            known = _KNOWN.get(name.lower())
            if known is None:
                continue
            if known == _TYPE and self.content_type is None:
                self.content_type = value.decode("latin-1")
            elif known == _ENCODING and not self.content_encoding:
                self.content_encoding = value.decode("latin-1").strip().lower()
            elif known == _LENGTH:
                length = True
            elif known == _TRANSFER:
                chunked = chunked or b"chunked" in value.lower()
        if self.content_encoding in ("gzip", "deflate"):
            self._decoder = _Decoder(self.content_encoding)
        self._until_close = not length and not chunked
        if not self._head.done():
            self._head.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > _HIGH_WATER and not self._paused and self._proto.transport is not None:
            self._paused = True
            self._proto.transport.pause_reading()
        self._wake()

    def _done(self, keep_alive: bool) -> None:
        self.complete = True
        self.keep_alive = keep_alive
        self._proto.unwatch(self)
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        if self.complete:
            return
        if self._until_close and self._head.done() and not isinstance(exc, TimeoutError) \
                and not isinstance(exc, _Malformed):
            self._done(False)  # the close is the body's end
            return
        if self._exc is None:
            self._exc = exc
        if not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()  # retrieved: nobody may be waiting on it any more
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _time_out(self) -> None:
        self._fail(TimeoutError())
        if self._proto.transport is not None:
            self._proto.transport.close()

    # --- read by the transport ---

    async def readany(self) -> bytes:
        """What has arrived since the last read (waiting for something), decoded; b"" at the
        end. A failure is raised once what arrived before it has been read."""
        if self._rest:
            data, self._rest = self._rest, b""
            return data
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self.complete:
                return self._decoder.flush() if self._decoder is not None else b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = self._take_chunks()
        if self._paused and self._proto.transport is not None:
            self._paused = False
            self._proto.transport.resume_reading()
        if self._decoder is not None:
            data = self._decoder.decode(data)
            if not data:
                return await self.readany()
        return data

    def ready_body(self) -> bytes | None:
        """The whole body when all of it is here and needs no decoding, else None (then read it
        with `readany`): a whole answer without a coroutine per read."""
        if not self.complete or self._decoder is not None or self._exc is not None \
                or self._rest or self._paused:
            return None
        return self._take_chunks()

    def _take_chunks(self) -> bytes:
        """Everything buffered, as one block (the buffer emptied)."""
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        return data

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes of the body; b"" at its end."""
        data = await self.readany()
        if len(data) > n:
            self._rest = data[n:]  # decoded already: handed out first by the next read
            return data[:n]
        return data

    def release(self) -> None:
        """Done with the answer: the connection goes back to the pool if it is reusable."""
        if self._released:
            return
        self._released = True
        proto = self._proto
        proto.unwatch(self)
        proto.resp = None
        if self.complete and self.keep_alive and self._exc is None:
            proto.pool._put(proto)
        else:
            proto.close()

    def close(self) -> None:
        """Drop the connection now."""
        self._proto.close()
        self.release()


# The headers `_headers_done` reads, by their lowercase names.
_TYPE, _ENCODING, _LENGTH, _TRANSFER = range(4)
_KNOWN = {b"content-type": _TYPE, b"content-encoding": _ENCODING, b"content-length": _LENGTH,
          b"transfer-encoding": _TRANSFER}


class _Malformed(H1Error):
    pass


class _Decoder:
    """gzip or deflate (zlib-wrapped or raw, as servers send either) undone chunk by chunk."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._z: zlib._Decompress | None = (
            zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None)

    def decode(self, data: bytes) -> bytes:
        if self._z is None:  # deflate: the first bytes say whether a zlib header is there
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        try:
            return self._z.decompress(data)
        except zlib.error as exc:
            raise _Malformed(f"the {self._encoding} body does not decode") from exc

    def flush(self) -> bytes:
        return self._z.flush() if self._z is not None else b""


class Keeper(Protocol):
    """What a connection needs of its pool (`h1.Pool`): to take it back once its answer was
    read, and to forget it once it is lost."""

    def _put(self, proto: Proto) -> None: ...

    def _forget(self, proto: Proto) -> None: ...


class Proto(asyncio.Protocol):
    """One connection: the parser's callbacks feed the response being read."""

    def __init__(self, pool: Keeper, key: Target) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.resp: Response | None = None
        self.lost = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        # The answer in flight's deadline: one timer for all the answers the connection carries.
        self._deadline = Deadline(self._expire)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        resp = self.resp
        if resp is None:  # bytes nobody asked for: the connection cannot be trusted again
            self.close()
            return
        resp.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            resp._fail(_Malformed(f"malformed HTTP answer ({type(exc).__name__})"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.transport = None
        self._deadline.cancel()
        self.pool._forget(self)
        if self.resp is not None:
            self.resp._fail(H1Error("the connection closed before the answer ended"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def watch(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Time the answer being read out at `deadline` (the loop's time)."""
        self._deadline.arm(loop, deadline)

    def unwatch(self, resp: Response) -> None:
        """`resp` needs no timing any more (it ended, or was given back)."""
        if self.resp is resp:
            self._deadline.disarm()

    def _expire(self) -> None:
        if self.resp is not None:
            self.resp._time_out()

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.resp is not None:
            self.resp._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.resp is not None:
            self.resp._headers_done(self._parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self.resp is not None:
            self.resp._feed(body)

    def on_message_complete(self) -> None:
        if self.resp is not None:
            self.resp._done(self._parser.should_keep_alive())

