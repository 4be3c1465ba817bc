"""What each `tools/call` leaves behind, settled around its chain in one place: the metrics per
server and tool, its usage row, and its span in OpenTelemetry's GenAI words for tool execution,
which never carries the call's arguments or its result."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.core.clock import FakeClock
from llmgw.core.errors import RateLimited
from llmgw.core.mcp import McpServer
from llmgw.core.settings import TelemetrySettings
from llmgw.core.tracing import NOOP_TRACER
from llmgw.gateway.mcp.accounting import ToolAccounting
from llmgw.gateway.mcp.call import BLOCKED, GUARD_NOTE, ToolCall, ToolResult
from llmgw.gateway.mcp.usage import McpUsageMeter
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.upstream.table import RoutingTable
from llmgw.server.telemetry import OtelTracer
from llmgw.store.store import Store
from tests.factories import user_key
from tests.fakes.otlp import OtlpReceiver
from tests.gateway.mcp.test_usage import written

SERVER = McpServer(name="github", url="http://tools.example/mcp", cost_per_call=0.5)
SECRET_ARGUMENT = "the-arguments-never-leave"
SECRET_RESULT = "the-result-never-leaves"


def call(**notes: str) -> ToolCall:
    _, key = user_key()
    return ToolCall(key=key, server=SERVER, tool="search", arguments={"q": SECRET_ARGUMENT},
                    request_id="req-1", notes=dict(notes))


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def run_calls(accounting: ToolAccounting) -> None:
    """One call of each outcome: ok, a tool error, a withheld result, a refusal."""
    async with accounting.accounted(call(), 1) as acct:
        acct.result(ToolResult(content=[{"type": "text", "text": SECRET_RESULT}]))
    async with accounting.accounted(call(), 2) as acct:
        acct.result(ToolResult.error("the tool failed"))
    blocked = call()
    async with accounting.accounted(blocked, 3) as acct:
        blocked.notes[GUARD_NOTE] = BLOCKED
        acct.result(ToolResult.error("withheld"))
    with pytest.raises(RateLimited):
        async with accounting.accounted(call(), "four"):
            raise RateLimited("over", 30, code="rate_limit_tool_calls")


async def test_metrics_count_each_call_by_server_tool_and_outcome_with_its_latency(
        store: Store, clock: FakeClock) -> None:
    metrics = Metrics(lambda: RoutingTable({}))
    accounting = ToolAccounting(McpUsageMeter(store, clock.now), metrics, NOOP_TRACER,
                                clock.monotonic)
    started = asyncio.Event()

    async def held() -> None:
        async with accounting.accounted(call()):
            started.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(held())
    await started.wait()
    assert samples(metrics)[("llmgw_mcp_inflight", (("server", "github"),))] == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await run_calls(accounting)
    seen = samples(metrics)
    assert seen[("llmgw_mcp_inflight", (("server", "github"),))] == 0
    for outcome, n in (("ok", 1), ("error", 2), ("blocked", 1), ("refused", 1)):  # cancelled: error
        labels = (("outcome", outcome), ("server", "github"), ("tool", "search"))
        assert seen[("llmgw_mcp_calls_total", labels)] == n
    assert seen[("llmgw_mcp_call_seconds_count", (("server", "github"), ("tool", "search")))] == 5
    # A server's workers' states add up in the scrape one of them answers.
    merged = text_string_to_metric_families(metrics.render([metrics.state()]).decode())
    calls = next(f for f in merged if f.name == "llmgw_mcp_calls")
    assert sum(s.value for s in calls.samples if s.name.endswith("_total")) == 10


async def test_usage_counts_what_ran_with_the_servers_cost_per_call(
        store: Store, clock: FakeClock) -> None:
    meter = McpUsageMeter(store, clock.now)
    accounting = ToolAccounting(meter, Metrics(lambda: RoutingTable({})), NOOP_TRACER,
                                clock.monotonic)
    await run_calls(accounting)
    await meter.flush()
    rows = list(written(store).values())
    assert sum(r.calls for r in rows) == 3  # the refused call never ran
    assert sum(r.errors for r in rows) == 1 and sum(r.blocked for r in rows) == 1
    assert sum(r.cost for r in rows) == 1.5


async def test_each_call_is_an_execute_tool_span_with_genai_attributes_and_no_payload(
        store: Store, clock: FakeClock) -> None:
    async with OtlpReceiver() as receiver:
        tracer = OtelTracer(TelemetrySettings(otlp_endpoint=receiver.url, service_name="llmgw-test"))
        accounting = ToolAccounting(McpUsageMeter(store, clock.now),
                                    Metrics(lambda: RoutingTable({})), tracer, clock.monotonic)
        await run_calls(accounting)
        await asyncio.to_thread(tracer.close)
    spans = receiver.named("execute_tool github__search")
    assert len(spans) == 4
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in spans}
    ok = by_id["1"]
    assert ok.kind == "internal" and not ok.error
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["gen_ai.tool.name"] == "github__search"
    assert ok.attributes["gen_ai.tool.type"] == "function"
    assert ok.attributes["llmgw.mcp.server"] == "github"
    assert ok.attributes["llmgw.mcp.outcome"] == "ok"
    assert by_id["2"].error and by_id["2"].attributes["error.type"] == "tool_error"
    assert by_id["3"].error and by_id["3"].attributes["llmgw.mcp.outcome"] == "blocked"
    assert by_id["four"].error and by_id["four"].attributes["error.type"] == "rate_limit_tool_calls"
    for s in spans:
        text = repr(s)
        assert SECRET_ARGUMENT not in text and SECRET_RESULT not in text
