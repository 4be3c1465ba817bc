"""The limits stage: admit the call against its key's limits, reserving what it may use, and
settle the reservation to what it used when the call ends."""

from __future__ import annotations

from collections.abc import Awaitable

from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.chain import Next, Stage
from llmgw.gateway.limits import Limiter, Ticket, reserve_estimate
from llmgw.gateway.wire.dialect import Api


def stage(limiter: Limiter) -> Stage:
    """The limits stage over `limiter`: in memory, or one round trip to the install's shared
    limit store when it has one. A refused call is marked `refused`: it is not counted."""

    def limits(call: UpstreamCall, nxt: Next) -> Awaitable[Reply]:
        if limiter.shared is not None:
            return _shared(limiter, call, nxt)
        try:
            ticket = limiter.admit(call.key, _reserve(call))
        except BaseException:  # turned away, or gone while waiting: never admitted
            call.exchange.refused = True
            raise
        call.exchange.closers.append(ticket.ended)
        return nxt(call)

    return limits


async def _shared(limiter: Limiter, call: UpstreamCall, nxt: Next) -> Reply:
    try:
        ticket: Ticket = await limiter.admit_shared(call.key, _reserve(call))
    except BaseException:  # turned away, or gone while waiting: never admitted
        call.exchange.refused = True
        raise
    call.exchange.closers.append(ticket.ended)
    return await nxt(call)


def _reserve(call: UpstreamCall) -> int:
    # Counting tokens generates nothing: it costs a request, no tokens.
    return 0 if call.api == Api.COUNT_TOKENS else reserve_estimate(call.ask.max_tokens, len(call.body))
