"""The guard stage: where a policy covers the call, judge the input, the output, or both.

It is the last stage before the upstream. Where no policy covers the call it hands it on as it
is; where one does, it takes the way out itself (`reach`) rather than the next step's reply:
it races the input verdict against the connection, and holds a stream's events back until
judged, which needs the connection, not a finished reply.

Input is judged before the upstream call, or (`input_mode: parallel`) while the upstream works,
its answer held until the verdict and dropped when unsafe. Output is judged whole, or for streams
in windows held back until judged: nothing the judge has not passed reaches the client. Judges
read the client's dialect (after any translation), through its wire module.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from llmgw.core.errors import LlmgwError
from llmgw.core.guard import Direction, InputMode, Policy
from llmgw.gateway.call import Exchange, Outbound, Reply, UpstreamCall
from llmgw.gateway.chain import Next, Stage
from llmgw.gateway.covering import covering
from llmgw.gateway.reach import reach
from llmgw.gateway.relay import answer, event_stream, events, relayed, send, streamed
from llmgw.gateway.transport import Connection, Transport
from llmgw.gateway.wire.dialect import SentSoFar
from llmgw.guard.enforcement import Guard, RequestInfo
from llmgw.guard.prompts import Turn


def stage(guard: Guard, transport: Transport) -> Stage:
    """The guard stage: the call judged where a policy covers it (a judge's own calls never
    are), else handed on as it is."""

    def guarded(call: UpstreamCall, nxt: Next) -> Awaitable[Reply]:
        # Returns the coroutine rather than awaiting it: one frame less on every request's way.
        if call.route.model.guard:
            return nxt(call)
        inputs, outputs = covering(guard, call)
        if (inputs or outputs) and call.ask.turns:
            key, out = call.key, call.out
            assert out is not None, "a call llmgw answers itself has no guard stage"
            info = RequestInfo(model=call.route.model.name, key_name=key.name,
                               key_label=key.label, request_id=call.request_id)
            return forward_guarded(transport, call, out, call.exchange,
                                   Judged(guard, info, inputs, outputs))
        return nxt(call)

    return guarded


@dataclass
class Window:
    """Events held back since the last judgment, and all text generated so far."""

    size: int
    held: list[bytes] = field(default_factory=list)
    text: str = ""
    unjudged: int = 0
    # The first event released and how many were: a blocked ending continues from them.
    sent: SentSoFar = SentSoFar()

    def add(self, event: bytes, piece: str) -> bool:
        """Hold `event`, which carries the text `piece`; True when enough new text is held to judge."""
        self.held.append(event)
        self.text += piece
        self.unjudged += len(piece)
        return self.unjudged >= self.size

    def release(self) -> bytes:
        """The held events, once judged safe."""
        out, self.held, self.unjudged = self.held, [], 0
        if out:
            self.sent = SentSoFar(self.sent.first or out[0].rstrip(b"\n"), self.sent.events + len(out))
        return b"".join(out)

    def block(self, ending: bytes) -> None:
        """Replace what is held by the stream's blocked ending."""
        self.held, self.unjudged = [ending], 0


@dataclass(frozen=True)
class Judged:
    """What a guarded call is judged under."""

    guard: Guard
    info: RequestInfo
    inputs: list[Policy]
    outputs: list[Policy]


async def forward_guarded(
    transport: Transport, call: UpstreamCall, out: Outbound, exchange: Exchange, judged: Judged
) -> Reply:
    """Forward one call under the policies that apply to it."""
    guard, info = judged.guard, judged.info
    turns = call.ask.turns
    before = [p for p in judged.inputs if p.input_mode == InputMode.BEFORE]
    parallel = [p for p in judged.inputs if p.input_mode == InputMode.PARALLEL]
    await guard.check(before, Direction.INPUT, turns, info)
    if not parallel and not judged.outputs:
        return await send(transport, call, out, exchange)
    verdict = asyncio.create_task(guard.check(parallel, Direction.INPUT, turns, info))
    conn: Connection | None = None
    streaming = False
    try:
        # A whole answer's headers come only when it is complete: race the connection against
        # the input verdict so an unsafe prompt drops the upstream at once.
        connecting = asyncio.ensure_future(reach(transport, call, out, exchange))
        try:
            await asyncio.wait({connecting, verdict}, return_when=asyncio.FIRST_COMPLETED)
            if verdict.done() and verdict.exception() is not None:
                raise verdict.exception()  # type: ignore[misc]
            conn, call, out = await connecting
        finally:
            if not connecting.done():
                connecting.cancel()
                await asyncio.wait({connecting})
            elif conn is None and not connecting.cancelled() and connecting.exception() is None:
                connecting.result()[0].release()  # connected as the verdict blocked
        if not 200 <= conn.status < 300:
            raise await _unless_blocked(conn, verdict, conn.failure())
        if not call.ask.stream or conn.status != 200:
            raw = await _unless_blocked(conn, verdict, conn.whole())
            exchange.tap.whole(raw)
            client_raw = answer(call, out, raw)
            if judged.outputs:
                said = Turn("assistant", call.wire.answer_text(client_raw))
                exchange.verdict(
                    await guard.check(judged.outputs, Direction.OUTPUT, [*turns, said], info))
            return Reply(conn.status, client_raw)
        await verdict  # nothing of the answer leaves before the input verdict
        event_stream(call, conn)
        streaming = True
        if not judged.outputs:
            return relayed(conn, call, out, exchange)
        return streamed(conn, _windowed(conn, call, out, exchange, judged))
    finally:
        if conn is not None and not streaming:
            conn.release()
        if not verdict.done():
            verdict.cancel()
        # wait() rather than await: the verdict's CancelledError is its own, while ours (the
        # client left) must go on up; its LlmgwError was raised above when it mattered.
        await asyncio.wait({verdict})
        error = None if verdict.cancelled() else verdict.exception()
        if error is not None and not isinstance(error, LlmgwError):
            raise error


async def _unless_blocked(
    conn: Connection, verdict: asyncio.Task[bool], read: Coroutine[Any, Any, Any]
) -> Any:
    """What `read` reads, unless the input verdict blocks first (then the upstream is dropped)."""
    reading = asyncio.ensure_future(read)
    try:
        await asyncio.wait({reading, verdict}, return_when=asyncio.FIRST_EXCEPTION)
        if verdict.done():
            verdict.result()  # raises when blocked
        got = await reading
        await verdict
        return got
    finally:
        if not reading.done():
            reading.cancel()
            conn.drop()


async def _windowed(
    conn: Connection, call: UpstreamCall, out: Outbound, exchange: Exchange, judged: Judged
) -> AsyncGenerator[bytes, None]:
    """The stream a window at a time, each released only after the judges passed it; a blocked
    window is never sent, and the stream ends with the dialect's blocked ending instead."""
    wire, outputs = call.wire, judged.outputs
    window = Window(size=min(p.stream_window_chars for p in outputs))
    turns = call.ask.turns

    async def passed() -> bool:
        """Judge everything so far; on a block, hold the blocked ending instead."""
        if window.unjudged:
            said = Turn("assistant", window.text)
            try:
                exchange.verdict(await judged.guard.check(outputs, Direction.OUTPUT,
                                                          [*turns, said], judged.info))
            except LlmgwError as exc:
                exchange.blocked = True
                conn.drop()  # stop the upstream generating what nobody will read
                window.block(wire.blocked_ending(call.ask.model, exc, window.sent))
                return False
        return True

    async for batch in events(conn, exchange.tap, wire, out.translation, call.ask.model):
        for event in batch:
            piece = wire.event_text(event)
            if not piece and not window.held:
                # Nothing to judge and nothing held before it (a stream's opening events): it
                # goes at once, so the client sees the stream start, and names it.
                window.held.append(event)
                yield window.release()
            elif window.add(event, piece):
                ok = await passed()
                yield window.release()
                if not ok:
                    return
    await passed()
    if window.held:
        yield window.release()
