"""The floor: a bare aiohttp pass-through proxy, to compare llmgw against.

Forwards every POST to `--upstream` + the request path with one pooled client session and
relays the answer: whole for JSON, chunk by chunk (`iter_any`) for an event stream. With
`--processes N` it runs N such processes on the port (SO_REUSEPORT), the floor for llmgw's
`--workers N`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import signal
import sys

import aiohttp
from aiohttp import web


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


def run(port: int, upstream: str, reuse_port: bool) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a child stops at its parent's SIGTERM
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port, upstream, reuse_port))
    else:
        uvloop.run(serve(port, upstream, reuse_port))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8081")
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    upstream = args.upstream.rstrip("/")
    if args.processes <= 1:
        run(args.port, upstream, False)
        return
    # The others are children that die with this process (SIGTERM from the bench stops it).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    children = [multiprocessing.Process(target=run, args=(args.port, upstream, True), daemon=True)
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
