"""The last step of every chain: sending a call upstream (`reach`) and turning the answer into a
reply, passed through as it came or translated into the client's dialect; streams chunk by
chunk."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator

import orjson

from llmgw.core.errors import UpstreamError
from llmgw.gateway.call import Exchange, Outbound, Reply, Stream, UpstreamCall
from llmgw.gateway.outbound import outbound
from llmgw.gateway.reach import reach
from llmgw.gateway.transport import Connection, Transport
from llmgw.gateway.usage import UsageTap
from llmgw.gateway.wire.dialect import Wire
from llmgw.gateway.wire.sse import SseSplitter
from llmgw.gateway.wire.translate import Translation

# Where the request path has always found them.
__all__ = ["Outbound", "answer", "event_stream", "events", "joined", "outbound", "passthrough",
           "relayed", "send", "streamed"]

logger = logging.getLogger(__name__)

SSE = "text/event-stream"
# How every whole answer of the APIs llmgw serves starts: a JSON object (or array). Read from
# its first bytes: a body passed through is never decoded.
_JSON = re.compile(rb"\s*[{\[]")


def answer(call: UpstreamCall, out: Outbound, raw: bytes) -> bytes:
    """A whole upstream answer (2xx) in the client's dialect; UpstreamError (502, its body not
    echoed) for one that is not JSON: an HTML page, a login portal's, a web UI's."""
    if out.translation is None:
        if _JSON.match(raw) is None:
            raise _not(call, "JSON")
        return raw
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _not(call, "JSON") from exc
    if not isinstance(obj, dict):
        raise UpstreamError(f"upstream for '{call.ask.model}' answered something that is not an object")
    return orjson.dumps(out.translation.answer(obj, call.ask.model))


def event_stream(call: UpstreamCall, conn: Connection) -> None:
    """Refuse (502, its body not read) an upstream's 200 to a stream that is not an event
    stream: a page relayed as SSE would reach the client as neither."""
    if not conn.streams():
        raise _not(call, "an event stream")


def _not(call: UpstreamCall, what: str) -> UpstreamError:
    return UpstreamError(f"upstream for '{call.ask.model}' answered something that is not {what}")


async def send(transport: Transport, call: UpstreamCall, out: Outbound, exchange: Exchange) -> Reply:
    """The upstream's answer to `call` (sent as `out`), unjudged; on a route, from the first of
    its targets that answers."""
    conn, call, out = await reach(transport, call, out, exchange)
    try:
        if not 200 <= conn.status < 300:
            raise await conn.failure()
        if call.ask.stream and conn.status == 200:  # the stream owns the connection from here
            event_stream(call, conn)
            return relayed(conn, call, out, exchange)
        raw = await conn.whole()
    except BaseException:
        conn.release()
        raise
    conn.release()
    exchange.tap.whole(raw)
    return Reply(conn.status, answer(call, out, raw))


def relayed(conn: Connection, call: UpstreamCall, out: Outbound, exchange: Exchange) -> Reply:
    """The upstream's stream, unjudged: as it came, or translated event by event."""
    if out.translation is None:
        reply = streamed(conn, passthrough(conn, exchange.tap, call.wire))
    else:
        reply = streamed(conn, joined(events(conn, exchange.tap, call.wire, out.translation,
                                             call.ask.model)))
    stream = reply.stream
    assert stream is not None
    stream.settled = conn.finished  # nothing between the upstream and the client waits
    if out.translation is None:
        # Bound methods, not closures over the stream: a cycle through the stream would leave
        # every request's answer to the cyclic collector, whose passes stall requests.
        stream.rest, stream.on_rest = conn.rest, exchange.tap.chunk
    return reply


def streamed(conn: Connection, chunks: AsyncGenerator[bytes, None]) -> Reply:
    """A streamed reply that gives the connection back when it is closed."""
    stream = Stream(chunks)
    stream.broke = conn.broke
    stream.on_close(lambda _completed: conn.release())
    return Reply(200, content_type=SSE, stream=stream)


def passthrough(conn: Connection, tap: UsageTap, wire: Wire) -> AsyncGenerator[bytes, None]:
    """The upstream's chunks as they come (counted on the way); its failure ends the stream with
    the dialect's error event."""
    return conn.chunks(tap.chunk, wire.stream_broke())


async def events(
    conn: Connection, tap: UsageTap, wire: Wire, translation: Translation | None, model: str
) -> AsyncIterator[list[bytes]]:
    """The answer as whole events in the client's dialect (blank lines included), a batch per
    upstream chunk; its failure ends it with the dialect's error event."""
    splitter = SseSplitter()
    translator = translation.stream(model) if translation is not None else None
    broke = wire.stream_broke()
    async for chunk in conn.chunks(tap.chunk, broke):
        if chunk is broke:  # the upstream broke: what was split so far is all there is
            yield [broke]
            return
        batch = splitter.feed(chunk)
        if translator is None:
            yield [e + b"\n\n" for e in batch]
        else:
            yield [out for e in batch for out in translator.feed(e)]
    rest = splitter.rest()
    if translator is None:
        yield [e + b"\n\n" for e in rest]
    else:
        yield [out for e in rest for out in translator.feed(e)] + translator.end()


async def joined(batches: AsyncIterator[list[bytes]]) -> AsyncGenerator[bytes, None]:
    """Each non-empty batch of events as one chunk."""
    async for batch in batches:
        if batch:
            yield b"".join(batch)
