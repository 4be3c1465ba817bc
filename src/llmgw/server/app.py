"""The composition root: builds the app, opens the store, starts and stops the loops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from llmgw.admin.cache import CacheAdmin
from llmgw.admin.keys import KeyAdmin
from llmgw.admin.mcp import McpAdmin
from llmgw.admin.people import People
from llmgw.admin.routes import RouteAdmin
from llmgw.admin.teams import TeamAdmin
from llmgw.api import registry
from llmgw.api.appkeys import (
    AGENTS,
    AUDIT,
    CACHE,
    CATALOG,
    CHANGES,
    CLUSTER,
    GATEWAY,
    GUARD,
    GUARD_ADMIN,
    JOBS,
    JUDGE_STATUS,
    KEYS,
    MCP,
    MCP_ADMIN,
    MCP_AGENTS,
    METRICS,
    METRICS_PEERS,
    METRICS_PUBLIC,
    NODES,
    PEOPLE,
    ROUTES,
    TEAMS,
)
from llmgw.api.console import routes as console
from llmgw.api.context import TRUSTED_PROXIES, networks
from llmgw.api.endpoints import bind
from llmgw.api.errors import openai_errors
from llmgw.control.agents import AgentService
from llmgw.control.catalog import CatalogService
from llmgw.control.duties import LeaderDuties
from llmgw.control.leader import Elector, Timing
from llmgw.control.mcp_agents import McpAgentService
from llmgw.control.node_admin import NodeAdmin
from llmgw.control.notifier import Notifier
from llmgw.control.replica_keeper import ReplicaKeeper
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core.clock import Clock, SystemClock
from llmgw.core.engine_keys import EngineKeys
from llmgw.core.errors import LlmgwError
from llmgw.core.protocol.nodes import ClusterOut, LeaseOut
from llmgw.core.settings import ServerSettings
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.core.types import Gpu, ReplicaState
from llmgw.gateway.inflight import InFlight
from llmgw.gateway.windows import Windows
from llmgw.guard.admin import GuardAdmin
from llmgw.guard.judge_client import warm_up as judge_warm_up
from llmgw.node import hardware
from llmgw.node.agent import AgentConfig, NodeAgent
from llmgw.node.engine_compat import FILE_NAME as COMPAT_FILE
from llmgw.node.engine_compat import EngineCompat
from llmgw.node.files import ModelFiles
from llmgw.node.gpus import GpuFinder, GpuRules
from llmgw.node.mcp_runs import McpRunConfig, McpRunner
from llmgw.server import judges, wiring
from llmgw.server.cluster import Leadership, server_views
from llmgw.server.plane import SIGNALS_S, DataPlane, make_tracer
from llmgw.server.plane import build as build_plane
from llmgw.server.workers import Peers, is_worker_row
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

AGENT_INTERVAL_S = 5.0
HEARTBEAT_INTERVAL_S = 10.0


@dataclass
class Loops:
    """Timing knobs of this process's own loops (tests shorten them); the leader's keepers
    run every `[control] keeper_interval_s`."""

    agent_s: float = AGENT_INTERVAL_S
    heartbeat_s: float = HEARTBEAT_INTERVAL_S
    backoff_base_s: float = 1.0


@dataclass
class Server:
    """One `llmgw server run` process: API, the leader's duties when elected, and (on one
    machine) an embedded node agent."""

    data_dir: Path
    settings: ServerSettings
    store: Store
    clock: Clock = field(default_factory=SystemClock)
    loops: Loops = field(default_factory=Loops)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # This process's id among the servers (hostname-pid unless given: tests run several).
    server_id: str | None = None
    # The server's other worker processes, when it runs more than one.
    peers: Peers | None = None
    # Requests in flight per key, shared with those workers.
    flight: InFlight | None = None
    # Minute windows, shared with those workers.
    windows: Windows | None = None
    # The response cache's file, shared with those workers (without Redis).
    answer_file: Path | None = None
    plane: DataPlane | None = None
    tracer: Tracer = NOOP_TRACER  # set by build_app from `[telemetry]`
    # Every change this process's loops hear of goes through it (`control.notifier`); the
    # server's extra workers' wakes too (`server.workers.WAKE_SIGNAL`).
    notifier: Notifier = field(default_factory=Notifier)
    # The embedded node's GPUs, looked at each heartbeat (NVML where installed, unless given).
    gpus: GpuFinder | None = None
    # What the last heartbeat found of them: a replica's devices' memory sets its split.
    found_gpus: list[Gpu] = field(default_factory=list)

    def build_app(self) -> web.Application:
        s, control, store, clock = self.settings, self.settings.control, self.store, self.clock
        tracer = self.tracer = make_tracer(s.telemetry)
        node_timeout = timedelta(seconds=control.node_timeout_s)
        notifier = self.notifier
        leadership = Leadership(clock, self.server_id) if self.server_id else Leadership(clock)
        self.server_id = leadership.server_id

        # The request path: a snapshot of the store, rebuilt when its revision moves.
        # The embedded node's engines take that node's own key, as a remote node's do.
        engine_keys = EngineKeys(store.install.engine_key())
        engine_key = engine_keys.for_node(s.node_id)
        plane = build_plane(store, s, clock, leadership.server_id, notifier.changed, self.flight,
                            tracer, self.windows, answer_file=self.answer_file)
        self.plane = plane
        refresher, metrics = plane.refresher, plane.metrics
        notifier.watch(refresher.wake)
        notifier.sync_with(refresher.refresh)
        if self.peers is not None:
            # The other workers' snapshots too: an admin call's answer and the next request
            # agree whichever worker takes that request.
            notifier.sync_with(self.peers.refresh)
        files = ModelFiles(self.data_dir / "models")
        agent = NodeAgent(
            AgentConfig(node_id=s.node_id, host="127.0.0.1", log_dir=self.data_dir / "logs",
                        start_timeout_s=s.engine_start_timeout_s,
                        backoff_base_s=self.loops.backoff_base_s, files=files,
                        engine_key=lambda: engine_key,
                        compat=EngineCompat(self.data_dir / COMPAT_FILE),
                        engine_commands=frozenset(s.engine_commands),
                        warm_up=judge_warm_up(
                            lambda: asyncio.to_thread(store.guard.enabled_judges)),
                        devices=lambda: self.found_gpus),
            assignments=wiring.agent_assignments(store, s.node_id),
            report=wiring.agent_reporter(store, clock, notifier.settle),
            forget=wiring.agent_forgetter(store),
            clock=clock,
            mcp=McpRunner(
                McpRunConfig(host="127.0.0.1", log_dir=self.data_dir / "logs",
                             engine_key=lambda: engine_key,
                             commands=frozenset(s.mcp_commands),
                             backoff_base_s=self.loops.backoff_base_s),
                servers=wiring.mcp_servers_reader(store, s.node_id, lambda: leadership.leading),
                report=wiring.mcp_reporter(store, clock, s.node_id, lambda: leadership.leading,
                                           notifier.settle),
                forget=wiring.mcp_forgetter(store, s.node_id),
                clock=clock,
            ),
        )
        notifier.watch(agent.wake)

        # The control plane's services (any server) and the leader's duties.
        read_activity = wiring.activity_reader(store, clock, timedelta(seconds=s.server_timeout_s))
        catalog = CatalogService(store, clock, on_change=notifier.settle, locate=files.locate,
                                 node_timeout=node_timeout, model_roots=s.model_dirs(self.data_dir),
                                 provider_key_env=s.provider_key_env, read_activity=read_activity)
        jobs = ServeJobs(store, files, catalog, clock, fence=leadership.fence,
                         on_submit=notifier.changed, tracer=tracer)
        keeper = ReplicaKeeper(wiring.keeper_reader(store),
                               wiring.keeper_applier(store, clock, leadership.fence), clock,
                               on_change=notifier.changed, node_timeout=node_timeout,
                               judge_machine=wiring.judge_machine_reader(store),
                               read_activity=read_activity, settings=control,
                               observe=wiring.keeper_metrics(metrics),
                               judge_targets=lambda: judge_keeper.targets())
        judge_keeper = judges.keeper(store, jobs, catalog, clock, control.judge_grace_s,
                                     notifier.settle, leadership.fence, leadership.server_id,
                                     lambda: leadership.leading,
                                     timedelta(seconds=s.server_timeout_s), keeper.wake.set,
                                     timedelta(seconds=control.judge_scale_window_s),
                                     timedelta(seconds=control.judge_idle_s))
        judge_keeper.tracer = tracer
        duties = LeaderDuties(keeper, judge_keeper, jobs, notifier, control, clock,
                              prune_audit=wiring.audit_pruner(store), tracer=tracer)

        app = web.Application(middlewares=[openai_errors], client_max_size=s.max_body_bytes)
        app[METRICS] = metrics
        app[TRUSTED_PROXIES] = networks(s.trusted_proxies)
        if self.peers is not None:
            app[METRICS_PEERS] = self.peers.states
        app[METRICS_PUBLIC] = s.metrics_public
        app[GATEWAY] = plane.gateway
        app[MCP] = plane.mcp
        app[CATALOG] = catalog
        app[JOBS] = jobs
        app[GUARD] = plane.guard
        app[GUARD_ADMIN] = GuardAdmin(store, clock, on_change=notifier.settle)
        app[KEYS] = KeyAdmin(store, clock, bytes.fromhex(s.key_secret),
                             lambda: refresher.current.default_limits, on_change=notifier.settle)
        app[ROUTES] = RouteAdmin(store, clock, plane.router, lambda: refresher.current.table,
                                 on_change=notifier.settle)
        app[TEAMS] = TeamAdmin(store, clock, on_change=notifier.settle)
        app[MCP_ADMIN] = McpAdmin(store, clock, on_change=notifier.settle)
        assert plane.gateway.cache is not None  # the plane always makes one
        app[CACHE] = CacheAdmin(store, clock, plane.gateway.cache, on_change=notifier.settle)
        app[JUDGE_STATUS] = judges.status(store, judge_keeper, clock, lambda: leadership.leading,
                                          leadership.server_id,
                                          timedelta(seconds=s.server_timeout_s))
        app[AGENTS] = AgentService(store, clock, engine_keys, on_change=notifier.settle,
                                   node_timeout=node_timeout,
                                   servers_nodes=frozenset({"local", s.node_id}))
        app[MCP_AGENTS] = McpAgentService(store, clock, on_change=notifier.settle)
        app[NODES] = NodeAdmin(store, clock, control.node_timeout_s, on_change=notifier.settle)
        app[PEOPLE] = People(store, clock, s.sso, lambda: refresher.current.revision,
                             on_change=notifier.settle)
        app[CLUSTER] = lambda: self._cluster_status(leadership, duties)
        app[AUDIT] = wiring.audit_reader(store)

        async def next_revision(since: int, wait_s: float) -> int:
            # A change is announced before this server's snapshot has it (`settle`): look
            # again until the revision moved or the time is up.
            deadline = clock.monotonic() + wait_s
            while refresher.current.revision == since and (left := deadline - clock.monotonic()) > 0:
                await notifier.next_change(left)
            return refresher.current.revision

        app[CHANGES] = next_revision
        app.add_routes(bind(registry.ENDPOINTS))
        sso = wiring.sso_client(s.sso) if s.ui else None
        if s.ui:
            console.mount(app, s.key_secret, sso)

        async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
            if s.embedded_node:
                await asyncio.to_thread(self._reset_own_replicas)
                await self._heartbeat_once()
            await self._server_heartbeat(leadership.server_id)
            await plane.start()
            plane.run(s, self._spawn)
            # Only the process that answers `/metrics` reads the replicas' load.
            self._spawn(plane.signals.run(SIGNALS_S), "replica-signals")
            self._spawn(self._heartbeats(leadership.server_id), "heartbeat")
            if s.embedded_node:
                self._spawn(agent.run(self.loops.agent_s), "node-agent")
            self._spawn(self._lead(leadership, duties), "leadership")
            yield
            await self._cancel_all()
            await plane.stop()  # a clean shutdown loses no usage
            if sso is not None:
                await sso.close()
            await self._quietly(store.servers.remove, leadership.server_id)
            store.close()
            await asyncio.to_thread(tracer.close)  # exports the spans still buffered

        app.cleanup_ctx.append(lifecycle)
        return app

    async def _cluster_status(self, leadership: Leadership, duties: LeaderDuties) -> ClusterOut:
        # This server's state first, the lease after: a server that says it leads took the
        # lease before saying so, so the lease read next shows it (an election landing between
        # two reads cannot pair "leading" with its predecessor's lease).
        leading, epoch, last_pass = leadership.leading, leadership.epoch, duties.last_pass
        lease = await asyncio.to_thread(self.store.leases.get)
        # A server's extra workers write their demand to rows of their own: not servers.
        servers = [r for r in await asyncio.to_thread(self.store.servers.list)
                   if not is_worker_row(r.id)]
        now = self.clock.now()
        holder = lease.holder if lease is not None and lease.expires_at > now else None
        if self.store.engine.dialect.name == "sqlite":
            holder = leadership.server_id
        return ClusterOut(
            servers=server_views(servers, holder, now,
                                 timedelta(seconds=self.settings.server_timeout_s)),
            server=leadership.server_id,
            database=self.store.engine.dialect.name,
            leading=leading,
            epoch=epoch,
            last_reconcile_at=last_pass.isoformat() if last_pass else None,
            lease=None if lease is None else LeaseOut(
                holder=lease.holder, epoch=lease.epoch, renewed_at=lease.renewed_at.isoformat(),
                expires_at=lease.expires_at.isoformat()),
        )

    async def step_down(self) -> None:
        """Leave the cluster before requests in flight drain: stop the election (which stops
        the leader's loops and releases the lease) and the heartbeats, and drop this server
        from the list. What serves requests keeps running until the app is cleaned up."""
        for name in ("leadership", "heartbeat"):
            for task in [t for t in self._tasks if t.get_name() == name]:
                task.cancel()
                await asyncio.wait({task})
                self._tasks.remove(task)
        if self.server_id is not None:
            await self._quietly(self.store.servers.remove, self.server_id)

    async def _lead(self, leadership: Leadership, duties: LeaderDuties) -> None:
        """On SQLite this one server is always the leader; on PostgreSQL it is elected. The
        duties start after the epoch is set and stop after it is cleared."""

        async def elected(epoch: int) -> None:
            await leadership.elected(epoch)
            await duties.start(epoch)

        async def deposed() -> None:
            await leadership.deposed()
            await duties.stop()

        if self.store.engine.dialect.name == "sqlite":
            try:
                # Inside the try: a stop that lands while the duties start must stop the loops
                # they already started (the elector does the same on PostgreSQL).
                await elected(0)
                await asyncio.Event().wait()
            finally:
                await asyncio.shield(deposed())
        s = self.settings
        timing = Timing(ttl=timedelta(seconds=s.leader_ttl_s),
                        renew_deadline=timedelta(seconds=s.leader_renew_deadline_s),
                        retry=timedelta(seconds=s.leader_retry_s))
        elector = Elector(leadership.server_id, self.store.leases, self.clock, timing,
                          elected, deposed)
        leadership.elector = elector
        await elector.run()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def _cancel_all(self) -> None:
        # Reverse order: the agent (started last) stops its engines before the store closes.
        for task in reversed(self._tasks):
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                logger.error("task %s ended with %r", task.get_name(), task.exception())
        self._tasks.clear()

    def _reset_own_replicas(self) -> None:
        # Engines of a previous run died with it (parent-death signal): forget their endpoints
        # so nothing routes to a port that is gone, and let the agent start them again.
        now = self.clock.now()
        for r in self.store.replicas.list(node_id=self.settings.node_id):
            if r.state in (ReplicaState.READY, ReplicaState.STARTING, ReplicaState.FAILED):
                self.store.replicas.update(
                    r.id, now, state=ReplicaState.STARTING, endpoint=None, pid=None
                )
        self.store.mcp_runs.reset(self.settings.node_id, now)

    async def _heartbeat_once(self) -> None:
        s = self.settings
        if self.gpus is None:
            self.gpus = GpuFinder.here(GpuRules(s.gpu_classes, frozenset(s.hide_gpus)))
        node = await asyncio.to_thread(hardware.probe, s.node_id, "127.0.0.1", self.gpus)
        self.found_gpus = node.devices
        await asyncio.to_thread(self.store.nodes.upsert, node, self.clock.now())

    async def _server_heartbeat(self, server_id: str) -> None:
        s, now = self.settings, self.clock.now()
        await asyncio.to_thread(self.store.servers.heartbeat, server_id,
                                f"http://{s.host}:{s.port}", now)
        # A server gone for a day is not coming back under that id (ids carry the pid).
        await asyncio.to_thread(self.store.servers.prune, now - timedelta(days=1))

    async def _heartbeats(self, server_id: str) -> None:
        # At least three heartbeats per node timeout: one lost write or one slow pass never
        # makes this server's own node look lost, whatever timeout the install sets.
        interval_s = min(self.loops.heartbeat_s, self.settings.control.node_timeout_s / 3)
        while True:
            await asyncio.sleep(interval_s)
            if self.settings.embedded_node:
                await self._quietly(self._heartbeat_once)
            await self._quietly(self._server_heartbeat, server_id)

    async def _quietly(self, step: Callable[..., Any], *args: Any) -> None:
        """A heartbeat that fails (the store is down) is logged; the next one tries again."""
        try:
            if asyncio.iscoroutinefunction(step):
                await step(*args)
            else:
                await asyncio.to_thread(step, *args)
        except LlmgwError as exc:
            logger.warning("%s failed: %s", getattr(step, "__name__", "heartbeat"), exc.message)
        except Exception:
            logger.exception("%s failed", getattr(step, "__name__", "heartbeat"))
