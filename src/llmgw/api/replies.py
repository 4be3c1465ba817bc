"""Writing the gateway's framework-free `Reply` as an aiohttp response: the only place the data
plane's answers meet the web framework."""

from __future__ import annotations

from aiohttp import web

from llmgw.api.context import response_headers
from llmgw.gateway.call import Reply, Stream

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class _Coalesced(web.StreamResponse):
    """A stream whose headers go out with its first bytes rather than on their own: for an
    answer that is all there already, one write to the socket instead of three."""

    _send_headers_immediately = False


async def write(request: web.Request, reply: Reply) -> web.StreamResponse:
    """Send `reply`: whole, or its stream chunk by chunk, closing the stream however it ends (the
    client leaving drops the upstream, so the engine stops generating)."""
    if reply.stream is None:
        headers = {"Content-Type": reply.content_type}
        if reply.headers:
            headers.update(reply.headers)
        return web.Response(body=reply.body, status=reply.status, headers=headers)
    stream, completed = reply.stream, False
    settled = stream.settled
    headers = response_headers(request, SSE_HEADERS)
    if reply.headers:
        headers.update(reply.headers)
    whole = settled is not None and settled()
    out = (_Coalesced if whole else web.StreamResponse)(status=reply.status, headers=headers)
    try:
        await out.prepare(request)
        if whole:
            await _rest(out, stream)
        else:
            async for chunk in stream.chunks:
                if settled is not None and settled():
                    await _rest(out, stream, chunk)
                    break
                await out.write(chunk)
            else:
                await out.write_eof()
        completed = True
    except ConnectionError:
        pass  # the client went away; nobody to answer
    finally:
        await stream.close(completed)
    return out


async def _rest(out: web.StreamResponse, stream: Stream, first: bytes = b"") -> None:
    """The stream's remaining chunks (all in memory: the upstream's answer has ended) and its end,
    written at once."""
    parts = [first] if first else []
    async for chunk in stream.chunks:
        parts.append(chunk)
    await out.write_eof(b"".join(parts))
