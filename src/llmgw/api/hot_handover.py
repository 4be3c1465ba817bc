"""aiohttp's connection handler on a hot connection (`api.hot_edge`), and the requests handed to it."""

from __future__ import annotations

import asyncio

from aiohttp import web

from llmgw.api import hot_reply as out


class HandOver:
    """The handler a hot connection gives its requests to once it gives it one: each request
    re-serialised from what was parsed, in order after the hot answers still being written."""

    def __init__(self, inner: web.RequestHandler, transport: asyncio.Transport) -> None:
        self._inner = inner
        inner.connection_made(transport)
        # Bytes for aiohttp that came while a hot answer is still being written: they go after
        # it (`release`), so answers never overtake each other.
        self.held: list[bytes] = []
        # The parser took the chunks of a chunked body apart: aiohttp, told the request is
        # chunked, must get chunks again.
        self._rechunk = False

    def head(self, method: bytes, version: str, url: bytes, headers: list[tuple[bytes, bytes]],
             chunked: bool, writing: bool) -> None:
        """A request's head as the client sent it (`writing`: a hot answer is being written)."""
        self._rechunk = chunked
        major, minor = version.split(".")
        lines = [b"%s %s HTTP/%s.%s\r\n" % (method, url, major.encode(), minor.encode())]
        lines += [b"%s: %s\r\n" % (name, value) for name, value in headers]
        lines.append(b"\r\n")
        self._feed(b"".join(lines), writing)

    def body(self, data: bytes, writing: bool) -> None:
        self._feed(out.chunk(data) if self._rechunk else data, writing)

    def end(self, writing: bool) -> None:
        """The request's body ended."""
        if self._rechunk:
            self._feed(out.END, writing)

    def _feed(self, data: bytes, writing: bool) -> None:
        if writing:
            self.held.append(data)
        else:
            self._inner.data_received(data)

    def release(self) -> None:
        """The hot answers are written: what was held goes to aiohttp."""
        held, self.held = self.held, []
        for data in held:
            self._inner.data_received(data)

    # The connection's events, which aiohttp's handler must see as if the connection were its own.

    def connection_lost(self, exc: BaseException | None) -> None:
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    @property
    def idle(self) -> bool:
        """Whether aiohttp has answered all it was handed and waits for more."""
        waiter = self._inner._waiter
        return not self.held and waiter is not None and not waiter.done()

    def close(self) -> None:
        """Answer what was handed over, then close the connection."""
        self._inner.close()
