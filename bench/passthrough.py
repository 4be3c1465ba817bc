"""The floor: a bare aiohttp pass-through proxy, to compare llmgw against.

Forwards every POST to `--upstream` + the request path with one pooled client session and
relays the answer: whole for JSON, chunk by chunk (`iter_any`) for an event stream.
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
from aiohttp import web


async def serve(port: int, upstream: str) -> None:
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
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"passthrough listening on 127.0.0.1:{port} -> {upstream}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await session.close()
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8081")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port, args.upstream.rstrip("/")))
    else:
        uvloop.run(serve(args.port, args.upstream.rstrip("/")))


if __name__ == "__main__":
    main()
