"""The data plane of one process: the request path's parts and the loops that keep them fed.

The server's main process and each of its extra workers (`server.worker`) build one of these;
only the main process adds the control plane around it (`server.app`)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from llmgw.core.clock import Clock
from llmgw.core.demand import REPORT_S
from llmgw.core.engine_keys import EngineKeys
from llmgw.core.settings import ServerSettings, TelemetrySettings
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.gateway import shared_limits
from llmgw.gateway.activity import ActivityTracker
from llmgw.gateway.cache import shared as shared_cache
from llmgw.gateway.cache.embed import Embedder
from llmgw.gateway.cache.file import InFile
from llmgw.gateway.cache.memory import MemoryCache
from llmgw.gateway.cache.service import ResponseCache
from llmgw.gateway.cache.store import AnswerStore, InMemory
from llmgw.gateway.fair import FairShare
from llmgw.gateway.gpu_metrics import GpuMetrics
from llmgw.gateway.inflight import InFlight, JudgeSlots, LocalInFlight, SharedInFlight
from llmgw.gateway.limits import Limiter
from llmgw.gateway.mcp.accounting import ToolAccounting
from llmgw.gateway.mcp.catalog import McpCatalog
from llmgw.gateway.mcp.endpoints import Endpoints
from llmgw.gateway.mcp.service import McpService, tool_stages
from llmgw.gateway.mcp.upstream import McpClient
from llmgw.gateway.mcp.usage import McpUsageMeter
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.replica_signals import ReplicaSignals
from llmgw.gateway.route_metrics import RouteMetrics
from llmgw.gateway.service import Gateway
from llmgw.gateway.snapshot import Refresher
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.router import Router
from llmgw.gateway.upstream.shared_cooldowns import CooldownBus
from llmgw.gateway.upstream.table import RoutingTable
from llmgw.gateway.usage import UsageMeter
from llmgw.gateway.windows import LocalWindows, Windows
from llmgw.guard import shared_slots
from llmgw.guard.enforcement import Guard
from llmgw.guard.judge_client import JudgeClient
from llmgw.guard.judge_queue import UNSHARED
from llmgw.guard.verdict_log import VerdictBuffer
from llmgw.server import wiring
from llmgw.server.demand import ActivityReporter
from llmgw.store.store import Store

VERDICT_FLUSH_S = 1.0
# How often usage is written and rate-limit counts are shared with the other servers.
ACCOUNTING_S = 1.0
# How often the replicas' load is read for `/metrics` (a scrape every 15 s sees fresh figures).
SIGNALS_S = 5.0

Spawn = Callable[[Coroutine[Any, Any, None], str], None]


def make_tracer(settings: TelemetrySettings) -> Tracer:
    """The OpenTelemetry-backed tracer when an OTLP endpoint is set; otherwise the no-op one,
    and neither the SDK nor an exporter is loaded."""
    if not settings.enabled:
        return NOOP_TRACER
    from llmgw.server.telemetry import OtelTracer  # only an install that traces loads the SDK

    return OtelTracer(settings)


@dataclass
class DataPlane:
    """Everything one process needs to answer `/v1/*` from memory."""

    refresher: Refresher
    queue: ColdQueue
    tracker: ActivityTracker
    demand: ActivityReporter
    client: Transport
    judge_client: JudgeClient
    metrics: Metrics
    verdict_log: VerdictBuffer
    guard: Guard
    meter: UsageMeter
    limiter: Limiter
    router: Router
    gateway: Gateway
    # What each ready replica of llmgw's engines says of its load, for `/metrics`: polled by the
    # process that answers `/metrics` only (`run_signals`).
    signals: ReplicaSignals
    # MCP tool calls' usage, metrics and spans (`gateway.mcp.accounting`).
    tools: ToolAccounting
    mcp: McpService  # `/mcp`: agents' tools from upstream MCP servers

    async def start(self) -> None:
        """Open the upstream clients and load the first snapshot."""
        await self.client.start()
        await self.judge_client.start()
        await self.refresher.refresh()

    def run(self, settings: ServerSettings, spawn: Spawn) -> None:
        """Start the loops: snapshot refresh, verdict log, limits and usage, demand."""
        spawn(self.refresher.run(settings.refresh_interval_s), "refresher")
        spawn(self.verdict_log.run(VERDICT_FLUSH_S), "verdict-log")
        spawn(self.limiter.run(ACCOUNTING_S, self.meter.flush), "limits-and-usage")
        spawn(self.demand.run(REPORT_S, self.tracker.snapshot), "demand")
        spawn(self.tools.meter.run(ACCOUNTING_S), "mcp-usage")
        if self.router.bus is not None:
            spawn(self.router.bus.run(self.router.cooled_elsewhere), "cooldown-bus")

    async def stop(self) -> None:
        """After the loops are cancelled: write the usage left (a clean stop loses none), close
        the clients."""
        await self.meter.flush()
        await self.tools.meter.flush()
        if self.gateway.cache is not None:
            await self.gateway.cache.close()
        await self.mcp.close()
        await self.client.close()
        await self.judge_client.close()
        if self.router.bus is not None:
            await self.router.bus.close()
        if self.limiter.shared is not None:
            await self.limiter.shared.close()


def build(store: Store, settings: ServerSettings, clock: Clock, activity_id: str,
          on_change: Callable[[], None] = lambda: None, flight: InFlight | None = None,
          tracer: Tracer = NOOP_TRACER, windows: Windows | None = None,
          on_cold: Callable[[], None] | None = None, answer_file: Path | None = None
          ) -> DataPlane:
    """The data plane over `store`. `activity_id` is the server row its demand is written to;
    `on_change` is told when the snapshot or the demand changed (the main process wakes its
    control loops with it); `on_cold`, when given, is told instead of `on_change` that a queue
    for a cold model was written (an extra worker wakes the main process with it); `flight`
    counts requests in flight and `windows` the minute windows (both shared by a server's
    workers); `tracer` records the requests' spans; `answer_file` is where a server's workers
    share the response cache, without Redis."""
    s = settings
    engine_keys = EngineKeys(store.install.engine_key())
    # Requests for a model with no ready replica wait here; the first one of a cold spell is
    # reported to the store at once, which wakes the leader's keeper.
    demand = ActivityReporter(store, activity_id, clock, on_cold or on_change)
    flight = flight or LocalInFlight()
    queue = ColdQueue(s.control, clock.monotonic, on_cold=demand.cold, flight=flight)
    # A busy local model's requests wait here, shared fairly between tenants (per process).
    fair = FairShare(s.control.queue_timeout_s, clock.monotonic, s.worker_count(),
                     s.control.fair_spare_slots)

    def refreshed(table: RoutingTable) -> None:
        queue.refreshed(table)
        fair.refreshed()  # a replica added frees slots for the held requests
        on_change()  # a change another process made reaches this one's loops too

    refresher = Refresher(store, bytes.fromhex(s.key_secret), engine_keys, s.provider_key_env,
                          on_refresh=refreshed)
    client = Transport(timeout_s=s.upstream_timeout_s)
    metrics = Metrics(lambda: refresher.current.table, queued=queue.depths,
                      judges=lambda: judge_client.loads(), held=fair.depths)
    # A server's workers share its judges' slots; one process alone needs no lease. With a
    # shared Redis the install's servers share them too.
    lease = JudgeSlots(flight) if isinstance(flight, SharedInFlight) else UNSHARED
    shared = shared_limits.connect(s.limits, clock.monotonic,
                                   scripts=(*shared_slots.SCRIPTS, *shared_cache.SCRIPTS))
    cluster = shared_slots.SharedSlots(shared.pipe) if shared else None
    judge_client = JudgeClient(refresher.locate_judge, clock.monotonic, metrics, lease, cluster)
    tracker = ActivityTracker(lambda: refresher.current.table, queue, judge_client.loads)
    verdict_log = VerdictBuffer(wiring.verdict_writer(store))
    guard = Guard(judge_client, lambda: refresher.current.guard,
                  wiring.both(verdict_log.record, metrics.judged),
                  clock.now, clock.monotonic, refresher.judge_ready)
    meter = UsageMeter(store, clock.now)
    limiter = Limiter(store, clock.now, lambda: refresher.current.default_limits,
                      lambda: refresher.current.keys, flight=flight,
                      windows=windows or LocalWindows(), shared=shared)
    if limiter.shared is not None:
        metrics.add_collector(shared_limits.DegradedMetric(limiter.shared))
    # Routes' cooldowns live in this process: each worker skips a failing target on its own.
    # With a shared Redis the cooldowns a process starts reach every process of the install.
    bus = CooldownBus(limiter.shared.client, limiter.shared.timeout_s) if limiter.shared else None
    router = Router(clock, bus=bus)
    metrics.add_collector(RouteMetrics(router, lambda: refresher.current.route_specs, clock))
    gpus = GpuMetrics(store.nodes.list, clock, timedelta(seconds=s.control.node_timeout_s))
    metrics.add_collector(gpus)
    metrics.add_refresher(gpus.refresh)
    # Made whether or not `[cache]` is on: a model or route may turn it on for itself.
    answers: AnswerStore
    if shared is not None:
        answers = shared_cache.InRedis(shared.pipe, s.cache.max_entries)
    elif answer_file is not None:
        answers = InFile(answer_file, s.cache.max_entries)
    else:
        answers = InMemory(MemoryCache(s.cache.max_entries, s.cache.max_memory_mb * 2**20,
                                       clock.monotonic))
    gateway = Gateway(refresher, client, clock, guard, limiter, meter, metrics, queue=queue,
                      router=router, tracer=tracer, people_limits=s.sso.playground_limits,
                      prefix_routing=s.prefix_routing, fair=fair,
                      cache=ResponseCache(
                          s.cache, answers, Embedder(client, lambda: refresher.current.table,
                                                     s.cache.embedding_model)
                          if s.cache.embedding_model else None))
    signals = ReplicaSignals(lambda: refresher.current.table)
    metrics.add_collector(signals)
    tools = ToolAccounting(McpUsageMeter(store, clock.now), metrics, tracer, clock.monotonic)
    ends = Endpoints(lambda: refresher.current.mcp_runs, engine_keys)
    mcp = McpService(McpCatalog(McpClient(client, ends.headers_of),
                                lambda: refresher.current.mcp_servers, ends.endpoint_of),
                     lambda: refresher.current.keys, bytes.fromhex(s.key_secret),
                     tool_stages(limiter, guard), accounting=tools,
                     origins=frozenset(o.rstrip("/").lower() for o in s.mcp_origins))
    return DataPlane(refresher, queue, tracker, demand, client, judge_client, metrics,
                     verdict_log, guard, meter, limiter, router, gateway, signals, tools, mcp)
