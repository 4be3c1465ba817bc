"""What every `tools/call` leaves behind, settled in one place around its chain: its usage row,
its metrics (`llmgw_mcp_*`) and its span, in OpenTelemetry's GenAI conventions for tool
execution (`execute_tool SERVER__TOOL`). Never the call's arguments or its result: a span says
which tool ran, for whom and how it ended.

The endpoint wraps the chain once:

    async with accounting.accounted(call, rpc_id) as acct:
        result = await chain(call)
        acct.result(result)

A result with `isError` counts as an error, a call the guard withheld (`call.notes[GUARD_NOTE]`)
as blocked, RateLimited or LimitsUnavailable out of the chain as refused, anything else that
escapes as an error (the exception goes on to the endpoint)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from llmgw.core import tracing
from llmgw.core.errors import LimitsUnavailable, RateLimited
from llmgw.core.mcp import tool_name
from llmgw.core.tracing import Kind, Span, Tracer
from llmgw.gateway.mcp.call import BLOCKED, GUARD_NOTE, ToolCall, ToolResult
from llmgw.gateway.mcp.usage import McpUsageMeter, Outcome
from llmgw.gateway.metrics import Metrics

OPERATION = "execute_tool"


def tool_span(tracer: Tracer, call: ToolCall, call_id: str | int | None = None) -> Span:
    """The span of one `tools/call`, under the current span when one records (the endpoint's
    request), else a root; `call_id` is the JSON-RPC request's id."""
    name = tool_name(call.server.name, call.tool)
    attributes: dict[str, str] = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "llmgw.mcp.server": call.server.name,
        "llmgw.key": call.key.label,
    }
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = str(call_id)
    if call.request_id:
        attributes["llmgw.request_id"] = call.request_id
    parent = tracing.current()
    if parent.recording:
        return parent.child(f"{OPERATION} {name}", Kind.INTERNAL, attributes)
    return tracer.root(f"{OPERATION} {name}", Kind.INTERNAL, attributes)


@dataclass(slots=True)
class Account:
    """One call's accounting while its chain runs: what it ended with."""

    outcome: Outcome = Outcome.OK
    error_type: str = ""

    def result(self, result: ToolResult) -> None:
        """The chain's result: an error when `isError` (a withheld result says so in the call's
        notes and counts as blocked)."""
        if result.is_error and self.outcome == Outcome.OK:
            self.outcome = Outcome.ERROR
            self.error_type = "tool_error"


@dataclass
class ToolAccounting:
    """The usage meter, metrics and tracer every tool call is settled with."""

    meter: McpUsageMeter
    metrics: Metrics
    tracer: Tracer
    monotonic: Callable[[], float] = time.monotonic

    @contextlib.asynccontextmanager
    async def accounted(self, call: ToolCall, call_id: str | int | None = None
                        ) -> AsyncIterator[Account]:
        """Account for `call` around the block: the in-flight gauge while it runs; then its
        usage (cost included), its count and latency, and its span, ended."""
        server, tool = call.server.name, call.tool
        span = tool_span(self.tracer, call, call_id)
        acct = Account()
        started = self.monotonic()
        self.metrics.tool_call_started(server)
        try:
            with tracing.active(span):
                try:
                    yield acct
                except (RateLimited, LimitsUnavailable) as exc:
                    acct.outcome, acct.error_type = Outcome.REFUSED, tracing.error_type(exc)
                    raise
                except BaseException as exc:
                    acct.outcome, acct.error_type = Outcome.ERROR, tracing.error_type(exc)
                    raise
                finally:
                    if call.notes.get(GUARD_NOTE) == BLOCKED:
                        acct.outcome, acct.error_type = Outcome.BLOCKED, "blocked"
                    if acct.outcome != Outcome.OK:
                        span.fail(acct.error_type)
                    span.set("llmgw.mcp.outcome", acct.outcome.value)
        finally:
            self.metrics.tool_call(server, tool, acct.outcome.value, self.monotonic() - started)
            self.meter.record(call.key.id, server, tool, acct.outcome, call.server.cost_per_call)
