"""The tool call's limits stage: admit the call against its key's and team's tool limits
(`tool_calls_per_minute`, `tool_concurrent`, shared by every key the key minted, as the request
kinds are) and its upstream server's cap (`McpServer.max_concurrency`), and let its slots go
when the call ends.

It counts with the model path's limiter (`gateway.limits`), on counters of their own
(`limit_kinds.tool_counter`): in the shared limit store (one atomic step, exact across every
server and worker) when the install has one, else in the server's in-flight table and windows
(exact across a server's workers, synced between servers). A call only counts where a limit is
set: with none, it costs nothing. A refusal is RateLimited (429 with Retry-After) for every
kind, the server's cap included: the agent's client backs off and retries, as for a model."""

from __future__ import annotations

import functools
from datetime import datetime

from llmgw.core.errors import RateLimited
from llmgw.core.mcp import McpServer
from llmgw.gateway.limit_kinds import Counts, LimitKind, tool_counter
from llmgw.gateway.limit_refusals import refusal
from llmgw.gateway.limits import Counter, Limiter, Ticket
from llmgw.gateway.mcp.call import ToolCall, ToolNext, ToolResult, ToolStage


def limits_stage(limiter: Limiter) -> ToolStage:
    """The limits stage over `limiter` (the gateway's, shared with the model path)."""

    async def limits(call: ToolCall, nxt: ToolNext) -> ToolResult:
        counters = tool_counters(limiter, call)
        if not counters:
            return await nxt(call)
        ticket: Ticket
        if limiter.shared is not None:
            ticket = await limiter.admit_calls_shared(counters)
        else:
            ticket = limiter.admit_calls(counters)
        try:
            return await nxt(call)
        finally:
            ticket.settle(0)

    return limits


def tool_counters(limiter: Limiter, call: ToolCall) -> list[Counter]:
    """What `call` counts against: the tool counters of its key and of every key above it
    (minters, team) that sets a tool limit, then its server's when it has a cap."""
    counters = []
    for member in limiter.keys().chain(call.key):
        lim = limiter.limits_for(member)
        if lim.tool_calls_per_minute is None and lim.tool_concurrent is None:
            continue
        counters.append(Counter(tool_counter(member.id), lim.tool_calls_per_minute,
                                lim.tool_concurrent, Counts.TOOL_CALLS,
                                functools.partial(refusal, call.key, member, lim)))
    server = call.server
    if server.max_concurrency is not None:
        counters.append(Counter(server_counter(server.name), None, server.max_concurrency,
                                Counts.SERVER_CALLS, functools.partial(server_refusal, server)))
    return counters


def server_counter(name: str) -> str:
    """The counter of the calls in flight to the upstream server `name`, on every server."""
    return tool_counter(f"server:{name}")


def server_refusal(server: McpServer, kind: LimitKind, _used: int, _now: datetime) -> RateLimited:
    """The 429 for a call over `server`'s cap: retry in a second, when a call may have ended."""
    words = kind.words.format(key=server.name, limit=server.max_concurrency)
    return RateLimited(words, 1, code=kind.code)
