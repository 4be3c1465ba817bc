"""What the hot edge (`api.hot_edge`) writes on its connections: response heads, chunks, and the
gateway's `Reply` whole or streamed. Bytes are made here with no framework in between: a head is
a few joins, the `Date` value is made once a second."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus

from llmgw.api.context import SERVER
from llmgw.api.edge import error_body_bytes
from llmgw.api.request_ids import new_id
from llmgw.gateway.call import Reply

SSE_HEAD = (b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n")
END = b"0\r\n\r\n"

Write = Callable[[bytes], None]  # raises ConnectionError when the client has gone


class _Date:
    """The `Date` header's value, made once a second rather than once a response."""

    def __init__(self) -> None:
        self._second = 0
        self._value = b""

    def __call__(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second, self._value = now, formatdate(now, usegmt=True).encode()
        return self._value


_DATE = _Date()
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_SERVER = SERVER.encode()


def head(status: int, rid: str, keep_alive: bool, extra: bytes) -> bytes:
    """A response's status line and headers, `extra` (complete header lines) among them."""
    return b"".join((
        b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")),
        b"Server: ", _SERVER, b"\r\nDate: ", _DATE(), b"\r\nX-Request-Id: ",
        rid.encode(), b"\r\n", extra, b"" if keep_alive else b"Connection: close\r\n", b"\r\n",
    ))


def whole(status: int, body: bytes, content_type: bytes, rid: str, keep_alive: bool,
          extra: bytes = b"") -> bytes:
    """A whole answer: head and body."""
    return head(status, rid, keep_alive, b"Content-Type: %s\r\nContent-Length: %d\r\n%s"
                % (content_type, len(body), extra)) + body


def extra(reply: Reply) -> bytes:
    """The reply's own header lines (`Retry-After`, `X-Llmgw-Cache`), or nothing."""
    headers = reply.headers
    if not headers:
        return b""
    return b"".join(b"%s: %s\r\n" % (k.encode("latin-1"), v.encode("latin-1"))
                    for k, v in headers.items())


def malformed(status: int, message: str, code: str) -> bytes:
    """The answer to a request the parser refused (the connection closes after it)."""
    return whole(status, error_body_bytes(message, "invalid_request_error", code),
                 b"application/json", new_id(""), False)


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def write_settled(write: Write, reply: Reply, rid: str, keep_alive: bool) -> bool:
    """A stream whose upstream answer is all here and needs nothing done to it, written in one
    go and closed without a turn of the loop; False when it is not such a stream."""
    stream = reply.stream
    assert stream is not None
    if stream.rest is None or stream.taken:
        return False
    try:
        rest = stream.take_rest()
    except BaseException:
        stream.close_untaken(False)  # the upstream is released and what was used settled
        raise
    if rest is None:
        return False
    completed = False
    try:
        write(head(reply.status, rid, keep_alive, SSE_HEAD + extra(reply))
              + (chunk(rest) if rest else b"") + END)
        completed = True
    except ConnectionError:
        pass  # the client went away; nobody to answer
    finally:
        stream.close_untaken(completed)
    return True


async def write_stream(write: Write, writable: asyncio.Event, reply: Reply, rid: str,
                       keep_alive: bool) -> None:
    """The stream chunk by chunk (chunked transfer encoding), pausing while the client reads
    slower than the upstream writes (`writable` clear); closed however it ends."""
    stream = reply.stream
    assert stream is not None
    completed = False
    settled = stream.settled
    try:
        first = head(reply.status, rid, keep_alive, SSE_HEAD + extra(reply))
        if settled is not None and settled():
            # The upstream's whole answer is here: one write for all of it.
            write(first + b"".join([chunk(c) async for c in stream.chunks]) + END)
        else:
            write(first)
            async for part in stream.chunks:
                if part:
                    write(chunk(part))
                    if not writable.is_set():
                        await writable.wait()
            write(END)
        completed = True
    except ConnectionError:
        pass  # the client went away; nobody to answer
    finally:
        await stream.close(completed)
