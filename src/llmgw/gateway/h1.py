"""A lean HTTP/1.1 client for the one thing the data plane asks of upstreams: POST a body, read
the answer's head, then its body whole or as it comes. Pooled keep-alive connections per host,
TLS for https, a total deadline per request, gzip and deflate decoded.

The request path spent more CPU in aiohttp's client (request and response objects, header
multidicts, timers, payload wrappers, per-chunk stream bookkeeping) than in everything llmgw does
itself; this client does the same work with a C parser (llhttp, through httptools) and little
else. It knows nothing of llmgw: `gateway.transport` is its only user and maps its errors once.
Here: where a base URL points, the request's head and the pool; each connection and the answer
it reads are `gateway.h1_connection`'s.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
import time
from collections.abc import Mapping
from urllib.parse import quote, unquote, urlsplit

from llmgw.gateway.h1_connection import ConnectError, H1Error, Proto, Response, Target

_PATH_SAFE = "/:@!$&'()*+,;=-._~%?"


@functools.lru_cache(maxsize=4096)
def target(base_url: str) -> Target:
    """A base URL (`http://127.0.0.1:8081/v1`, `https://api.openai.com/v1`) taken apart once."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectError(f"not an http(s) URL: {parts.scheme}://…")
    tls = parts.scheme == "https"
    default = 443 if tls else 80
    try:
        port = parts.port or default
    except ValueError as exc:
        # A stored URL from before the catalog refused such ports: a 502, never a 500.
        raise ConnectError("the upstream's URL has no valid port") from exc
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    basic = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        basic = "Basic " + base64.b64encode(pair.encode()).decode()
    return Target(tls, host, port, parts.path.rstrip("/"), host_header, basic)



class Pool:
    """Keep-alive connections per host, opened as needed, reused while they stay open."""

    def __init__(self, connect_timeout_s: float, keepalive_s: float = 30.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._idle: dict[Target, list[Proto]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def post(self, base_url: str, path: str, body: bytes, headers: Mapping[str, str],
                   timeout_s: float, method: str = "POST") -> Response:
        """POST `body` to `base_url` + `path` and wait for the answer's head, all within
        `timeout_s` (which also bounds reading the body, until `release`). ConnectError when no
        connection could be made; H1Error or TimeoutError when the answer failed."""
        t = target(base_url)
        head = _head(t, path, headers, len(body), method)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            proto = self._take(t)
            reused = proto is not None
            if proto is None:
                proto = await self._open(t, deadline - loop.time())
            assert proto.transport is not None
            # Sent before the answer's bookkeeping is made, so the upstream starts on it sooner:
            # nothing can be read before this coroutine next yields.
            if len(body) < 65536:
                proto.transport.write(head + body)
            else:
                proto.transport.writelines((head, body))
            resp = Response(proto, loop)
            proto.resp = resp
            proto.watch(loop, deadline)
            try:
                await resp._head
            except H1Error:
                resp.close()
                # A kept-alive connection the upstream had just closed: nothing was read, so
                # the request goes again on a new connection.
                if reused and not resp.got_bytes:
                    continue
                raise
            except BaseException:
                resp.close()
                raise
            return resp

    def _take(self, t: Target) -> Proto | None:
        idle = self._idle.get(t)
        now = time.monotonic()
        while idle:
            proto = idle.pop()
            if not proto.lost and now - proto.idle_since < self.keepalive_s:
                return proto
            proto.close()
        return None

    async def _open(self, t: Target, timeout_s: float) -> Proto:
        if self._closed:
            raise ConnectError("the client is closed")
        loop = asyncio.get_running_loop()
        ctx = self._context() if t.tls else None
        try:
            async with asyncio.timeout(min(timeout_s, self.connect_timeout_s)):
                _, proto = await loop.create_connection(
                    lambda: Proto(self, t), t.host, t.port, ssl=ctx,
                    server_hostname=t.host if ctx is not None else None)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectError(f"cannot connect to {t.host}:{t.port}: "
                               f"{type(exc).__name__}") from exc
        return proto

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _put(self, proto: Proto) -> None:
        if self._closed or proto.lost:
            proto.close()
            return
        proto.idle_since = time.monotonic()
        self._idle.setdefault(proto.key, []).append(proto)

    def _forget(self, proto: Proto) -> None:
        idle = self._idle.get(proto.key)
        if idle and proto in idle:
            idle.remove(proto)

    async def close(self) -> None:
        """Close every idle connection; connections in use close when released."""
        self._closed = True
        for idle in self._idle.values():
            for proto in idle:
                proto.close()
        self._idle.clear()


def _head(t: Target, path: str, headers: Mapping[str, str], length: int,
          method: str = "POST") -> bytes:
    """The request line and headers. A header that would split the request is refused."""
    return b"%sContent-Length: %d\r\n\r\n" % (
        _lines(t, path, tuple(headers.items()), method), length)


@functools.lru_cache(maxsize=4096)
def _lines(t: Target, path: str, headers: tuple[tuple[str, str], ...], method: str = "POST"
           ) -> bytes:
    """All of the head but `Content-Length`: the same few on every request, made once each."""
    lines = [f"{method} {quote(t.prefix + path, safe=_PATH_SAFE)} HTTP/1.1",
             f"Host: {t.host_header}"]
    if t.basic_auth is not None and not any(n.lower() == "authorization" for n, _ in headers):
        lines.append(f"Authorization: {t.basic_auth}")
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise H1Error(f"header {name!r} cannot be sent")
        lines.append(f"{name}: {value}")
    lines.append("")
    return "\r\n".join(lines).encode()
