"""Writing the gateway's framework-free `Reply` as an aiohttp response: the only place the data
plane's answers meet the web framework."""

from __future__ import annotations

from aiohttp import web

from llmgw.api.context import response_headers
from llmgw.gateway.call import Reply

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


async def write(request: web.Request, reply: Reply) -> web.StreamResponse:
    """Send `reply`: whole, or its stream chunk by chunk, closing the stream however it ends (the
    client leaving drops the upstream, so the engine stops generating)."""
    if reply.stream is None:
        return web.Response(body=reply.body, status=reply.status,
                            headers={"Content-Type": reply.content_type})
    stream, completed = reply.stream, False
    out = web.StreamResponse(status=reply.status,
                             headers=response_headers(request, SSE_HEADERS))
    try:
        await out.prepare(request)
        async for chunk in stream.chunks:
            await out.write(chunk)
        completed = True
        await out.write_eof()
    except ConnectionError:
        pass  # the client went away; nobody to answer
    finally:
        await stream.close(completed)
    return out
