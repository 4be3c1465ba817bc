"""Passing a request on to the server's main process, as it came: how an extra worker answers
everything but the data plane (admin and agent APIs, the console, `/metrics`), so that those see
one process's state (the leader's loops, the judge keeper, sessions, every worker's metrics)."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from llmgw.api.context import RELAYED_FOR, RELAYED_HTTPS, REQUEST_ID, client_address, over_https
from llmgw.api.errors import Handler
from llmgw.core.errors import ServerUnreachable

# Hop-by-hop headers (RFC 9110 7.6.1) and what the two connections frame for themselves.
_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "content-length", "host"})


def main_session(socket_path: str) -> aiohttp.ClientSession:
    """The client to the main process's private socket. No cookie jar: a cookie one client was
    given must never ride along on another client's request; no decompression: bodies pass as
    they are; no total timeout: an agent's long poll waits as long as the main process says."""
    return aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=socket_path, limit=64),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
    )


def to_main(session: Callable[[], aiohttp.ClientSession]) -> Handler:
    """A handler that relays the request to the main process and its answer back, streamed."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers: CIMultiDict[str] = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in _HOP)
        headers["Host"] = request.host
        # Replaces any the client sent: the main process believes it from its socket only.
        headers[RELAYED_FOR] = client_address(request)
        headers[RELAYED_HTTPS] = "1" if over_https(request) else "0"
        rid = request.get(REQUEST_ID)
        if rid:
            headers["X-Request-Id"] = rid  # the same id in both processes' logs
        out: web.StreamResponse | None = None
        try:
            async with session().request(request.method, "http://llmgw" + request.path_qs,
                                         data=body or None, headers=headers,
                                         allow_redirects=False) as up:
                out = web.StreamResponse(status=up.status, reason=up.reason)
                for k, v in up.headers.items():
                    if k.lower() not in _HOP:
                        out.headers.add(k, v)
                if up.content_length is not None:
                    out.content_length = up.content_length
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except aiohttp.ClientConnectionError as exc:
            if out is not None and out.prepared:  # the answer had started: only closing is left
                raise ConnectionError("the main process went away mid-answer") from exc
            raise ServerUnreachable("this server's main process is not answering; "
                                    "retry shortly") from exc

    return handler
