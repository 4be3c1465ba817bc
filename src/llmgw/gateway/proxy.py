"""Forwarding a request to an upstream and relaying its answer, streamed or whole.

Bytes pass through: the request body goes out as the client sent it (unless a remote model's
name must be rewritten) and a stream is relayed chunk by chunk without being parsed. Upstreams are
asked not to compress (`Accept-Encoding: identity`); one that compresses anyway is decoded (gzip,
deflate) before its answer reaches the client or the usage tap, and any other encoding is a 502.
An upstream's error answer never reaches the client as it came (see `upstream_errors`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from llmgw.core.errors import LlmgwError, UpstreamError, UpstreamTimeout
from llmgw.gateway.context import response_headers
from llmgw.gateway.routing import Route, RoutingTable, Upstream
from llmgw.gateway.upstream_errors import MAX_ERROR_BODY, upstream_failure
from llmgw.gateway.usage import UsageTap

logger = logging.getLogger(__name__)

# How long an upstream that could not be reached goes last in line: long enough to cover the
# routing table's next refresh, which drops a replica whose node is gone.
DOWN_FOR_S = 5.0

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}

# What aiohttp decodes without an optional library; anything else is refused with a 502 rather
# than relayed as bytes the client cannot read and the usage tap cannot count.
DECODED = frozenset({"identity", "gzip", "deflate"})
# A whole answer is held in memory to be relayed: far above any honest answer (a batch of
# embeddings included), low enough that a small compressed body cannot inflate without bound.
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class UpstreamClient:
    """One pooled HTTP client for all upstreams (aiohttp pools connections per host)."""

    def __init__(self, timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(
        self,
        request: web.Request,
        table: RoutingTable,
        route: Route,
        path: str,
        body: bytes,
        payload: dict[str, Any],
        stream: bool,
        tap: UsageTap | None = None,
    ) -> web.StreamResponse:
        """Relay the upstream's answer to the client as it comes: whole, or chunk by chunk."""
        async with self.open(table, route, path, body, payload) as (up, resp):
            try:
                if not 200 <= resp.status < 300:
                    raise failure(up, resp, await read_error(resp))
                if not stream or resp.status != 200:
                    raw = await read_answer(up, resp)
                    if tap is not None:
                        tap.whole(raw)
                    return web.Response(
                        body=raw,
                        status=resp.status,
                        headers={"Content-Type": resp.headers.get("Content-Type", "application/json")},
                    )
                return await relay(request, resp, tap)
            except TimeoutError as exc:
                raise UpstreamTimeout(f"upstream {upstream_name(up)} did not answer in time") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamError(f"upstream {upstream_name(up)} failed: {type(exc).__name__}") from exc

    @contextlib.asynccontextmanager
    async def open(
        self, table: RoutingTable, route: Route, path: str, body: bytes, payload: dict[str, Any]
    ) -> AsyncIterator[tuple[Upstream, aiohttp.ClientResponse]]:
        """The upstream's response once its headers arrived, from the least busy upstream; a
        refused connection is retried once on another. The upstream counts as busy until exit."""
        assert self._session is not None, "UpstreamClient.start() was not called"
        if route.upstream_model and payload.get("model") != route.upstream_model:
            body = orjson.dumps({**payload, "model": route.upstream_model})
        tried: frozenset[str] = frozenset()
        while True:
            up = table.choose(route, tried)
            headers = {"Content-Type": "application/json", "Accept-Encoding": "identity",
                       **up.headers}
            up.outstanding += 1
            try:
                # A redirect is an upstream fault (502), never followed: it would carry the
                # request, and the upstream's credentials, somewhere the catalog did not name.
                resp = await self._session.post(up.base_url + path, data=body, headers=headers,
                                                allow_redirects=False)
                break
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                # Nothing was sent: trying another upstream cannot run the request twice.
                up.outstanding -= 1
                up.down_until = time.monotonic() + DOWN_FOR_S
                logger.warning("upstream %s could not be reached: %s", up.id, exc)
                tried = tried | {up.id}
                if len(tried) >= 2 or len(tried) >= len(route.upstreams):
                    raise UpstreamError(
                        f"model '{route.model.name}': could not connect to an upstream"
                    ) from exc
            except TimeoutError as exc:
                up.outstanding -= 1
                raise UpstreamTimeout(f"upstream {upstream_name(up)} did not answer in time") from exc
            except aiohttp.ClientError as exc:
                up.outstanding -= 1
                raise UpstreamError(f"upstream {upstream_name(up)} failed: {type(exc).__name__}") from exc
            except BaseException:  # cancelled while connecting
                up.outstanding -= 1
                raise
        try:
            encoding = resp.headers.get("Content-Encoding", "").strip().lower() or "identity"
            if encoding not in DECODED:
                raise UpstreamError(f"upstream {upstream_name(up)} answered in a content encoding "
                                    "llmgw does not decode")
            yield up, resp
        finally:
            # An unread body closes the connection rather than returning it to the pool.
            resp.release()
            up.outstanding -= 1


async def relay(
    request: web.Request, resp: aiohttp.ClientResponse, tap: UsageTap | None = None
) -> web.StreamResponse:
    """Relay an SSE stream chunk by chunk; a failure after the headers ends it with an error event."""
    out = web.StreamResponse(status=200, headers=response_headers(request, SSE_HEADERS))
    try:
        await out.prepare(request)
    except ConnectionError:
        resp.close()  # the client left before the first byte; not an upstream failure
        return out
    chunks = resp.content.iter_any()
    while True:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning("upstream stream broke: %s", type(exc).__name__)
            await _write_quietly(out, STREAM_BROKE)
            break
        if tap is not None:
            tap.chunk(chunk)
        try:
            await out.write(chunk)
        except ConnectionError:
            # The client went away: drop the upstream connection so the engine stops generating.
            resp.close()
            return out
    await _write_quietly(out, b"")
    return out


STREAM_BROKE = b"data: " + orjson.dumps(
    {"error": {"message": "upstream stream broke", "type": "server_error", "param": None,
               "code": "upstream_error"}}
) + b"\n\n"


async def _write_quietly(out: web.StreamResponse, data: bytes) -> None:
    try:
        if data:
            await out.write(data)
        await out.write_eof()
    except ConnectionError:
        pass


async def read_answer(up: Upstream, resp: aiohttp.ClientResponse) -> bytes:
    """A whole answer, decoded; UpstreamError beyond MAX_ANSWER_BYTES."""
    blocks, size = [], 0
    while block := await resp.content.readany():
        size += len(block)
        if size > MAX_ANSWER_BYTES:
            raise UpstreamError(f"upstream {upstream_name(up)} answered more than "
                                f"{MAX_ANSWER_BYTES // 2**20} MiB")
        blocks.append(block)
    return b"".join(blocks)


async def read_error(resp: aiohttp.ClientResponse) -> bytes:
    """The start of an error answer's body: enough for an error in OpenAI's shape."""
    data = bytearray()
    while len(data) < MAX_ERROR_BODY:
        part = await resp.content.read(MAX_ERROR_BODY - len(data))
        if not part:
            break
        data += part
    return bytes(data)


def failure(up: Upstream, resp: aiohttp.ClientResponse, body: bytes) -> LlmgwError:
    """The client's error for an upstream's non-2xx answer whose body starts with `body`."""
    return upstream_failure(upstream_name(up), resp.status, resp.headers, body)


def upstream_name(up: Upstream) -> str:
    return up.id if not up.id.startswith("remote:") else up.id.removeprefix("remote:")
