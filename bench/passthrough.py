"""The floor: a bare aiohttp pass-through proxy, to compare llmgw against.

Forwards every POST to `--upstream` + the request path with one pooled client session and
relays the answer: whole for JSON, chunk by chunk (`iter_any`) for an event stream. With
`--processes N` it runs N such processes on the port (SO_REUSEPORT), the floor for llmgw's
`--workers N`.

With `--raw` the server side is not aiohttp but a bare asyncio protocol parsing with httptools,
forwarding through llmgw's own upstream client (`llmgw.gateway.h1`): no routing, headers,
errors or limits, only the two hops. It shows how much of a pass-through's added latency is the
HTTP server itself, which is what a leaner data-plane server could win.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import signal
import sys
from typing import cast

import aiohttp
import httptools
from aiohttp import web

from llmgw.gateway.h1 import Pool


async def serve(port: int, upstream: str, reuse_port: bool = False) -> None:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        auto_decompress=False,
    )

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        async with session.post(upstream + request.path, data=body, headers=headers) as resp:
            if resp.content_type != "text/event-stream":
                return web.Response(
                    body=await resp.read(), status=resp.status, content_type=resp.content_type
                )
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_port=reuse_port or None).start()
    print(f"passthrough listening on 127.0.0.1:{port} -> {upstream}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await session.close()
        await runner.cleanup()


class RawPassThrough(asyncio.Protocol):
    """One client connection of the `--raw` server: each request, once whole, is forwarded."""

    def __init__(self, pool: Pool, upstream: str) -> None:
        self._pool, self._upstream = pool, upstream
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._body: list[bytes] = []
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        path, body = self._url.decode(), b"".join(self._body)
        self._url, self._body = b"", []
        asyncio.get_running_loop().create_task(self._forward(path, body))

    async def _forward(self, path: str, body: bytes) -> None:
        out = self._transport
        assert out is not None
        resp = await self._pool.post(self._upstream, path, body,
                                     {"Content-Type": "application/json"}, 30.0)
        kind = resp.headers.get("Content-Type", "application/json")
        if kind.startswith("text/event-stream"):
            out.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            while chunk := await resp.readany():
                out.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            out.write(b"0\r\n\r\n")
        else:
            chunks = []
            while chunk := await resp.readany():
                chunks.append(chunk)
            data = b"".join(chunks)
            out.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                      % (kind.encode(), len(data), data))
        resp.release()


async def serve_raw(port: int, upstream: str, reuse_port: bool = False) -> None:
    pool = Pool(connect_timeout_s=5.0)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RawPassThrough(pool, upstream), "127.0.0.1", port,
                                      reuse_port=reuse_port or None)
    print(f"raw passthrough listening on 127.0.0.1:{port} -> {upstream}", flush=True)
    await server.serve_forever()


def run(port: int, upstream: str, reuse_port: bool, raw: bool = False) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a child stops at its parent's SIGTERM
    main = (serve_raw if raw else serve)(port, upstream, reuse_port)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8081")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--raw", action="store_true",
                        help="a bare asyncio + httptools server instead of aiohttp's")
    args = parser.parse_args()
    upstream = args.upstream.rstrip("/")
    if args.processes <= 1:
        run(args.port, upstream, False, args.raw)
        return
    # The others are children that die with this process (SIGTERM from the bench stops it).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    children = [multiprocessing.Process(target=run, args=(args.port, upstream, True, args.raw),
                                        daemon=True)
                for _ in range(args.processes)]
    for child in children:
        child.start()
    try:
        for child in children:
            child.join()
    finally:
        for child in children:
            child.terminate()


if __name__ == "__main__":
    main()
