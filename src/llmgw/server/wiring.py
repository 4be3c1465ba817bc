"""Adapters between the store and the control loops of one server process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

from llmgw.api.console.oidc import OidcClient
from llmgw.control.mcp_agents import runs_on
from llmgw.control.replica_keeper import Action, Forget, Pend, Place, Stop, new_replica
from llmgw.core.audit import AuditEntry
from llmgw.core.clock import Clock
from llmgw.core.demand import Activity, Evicted
from llmgw.core.errors import ConfigError
from llmgw.core.guard import VerdictRecord
from llmgw.core.mcp import McpRun, McpRunState, McpServer
from llmgw.core.protocol.audit import AuditQuery
from llmgw.core.settings import SsoSettings
from llmgw.core.types import Model, Node, Replica, ReplicaState
from llmgw.gateway.metrics import Metrics
from llmgw.node.agent import Assignment
from llmgw.node.supervisor import Status
from llmgw.store.lease_repo import Fence
from llmgw.store.store import Store


def keeper_reader(
    store: Store,
) -> Callable[[], Awaitable[tuple[list[Model], list[Node], list[Replica]]]]:
    def read() -> tuple[list[Model], list[Node], list[Replica]]:
        return store.catalog.list(), store.nodes.list(), store.replicas.list()

    async def run() -> tuple[list[Model], list[Node], list[Replica]]:
        return await asyncio.to_thread(read)

    return run


def judge_machine_reader(store: Store) -> Callable[[], Awaitable[dict[str, str]]]:
    """The judge machine's labels (`server init --judge-node`), read on every keeper pass."""

    async def run() -> dict[str, str]:
        return await asyncio.to_thread(store.install.judge_node_selector)

    return run


def keeper_applier(
    store: Store, clock: Clock, fence: Callable[[], Fence | None]
) -> Callable[[Action], Awaitable[None]]:
    """Writes the keeper's actions, each fenced: a deposed leader's writes are refused."""

    def apply(action: Action) -> None:
        now, f = clock.now(), fence()
        match action:
            case Place(replica_id=None) | Pend(replica_id=None):
                store.replicas.create(new_replica(action), now, f)
            case Place():
                assert action.replica_id is not None
                store.replicas.update(action.replica_id, now, f, last_error=None,
                                      **action.placement())
            case Pend():
                assert action.replica_id is not None
                store.replicas.update(action.replica_id, now, f, last_error=action.reason)
            case Stop(room_for=str()):
                # Said on the replica while its engine stops, and kept for `model resources`.
                store.replicas.update(action.replica_id, now, f, state=ReplicaState.STOPPING,
                                      last_error=action.reason)
                store.install.record_eviction(Evicted(
                    at=now, replica=action.replica_id, model=action.model or "",
                    node=action.node_id or "", room_for=action.room_for, reason=action.reason), f)
            case Stop():
                store.replicas.update(action.replica_id, now, f, state=ReplicaState.STOPPING)
            case Forget():
                store.replicas.delete(action.replica_id, f)

    async def run(action: Action) -> None:
        await asyncio.to_thread(apply, action)

    return run


def activity_reader(store: Store, clock: Clock,
                    server_timeout: timedelta) -> Callable[[], Awaitable[Activity]]:
    """The live servers' demand, merged (what the keeper plans on and `model list` shows)."""

    async def run() -> Activity:
        return await asyncio.to_thread(store.servers.activity, clock.now(), server_timeout)

    return run


def keeper_metrics(metrics: Metrics) -> Callable[[Action], None]:
    """Counts the keeper's cold starts and evictions in this server's metrics."""

    def observe(action: Action) -> None:
        if isinstance(action, Place) and action.cold:
            metrics.cold_start(action.model)
        elif isinstance(action, Stop) and action.room_for is not None and action.model:
            metrics.evicted(action.model)

    return observe


def agent_assignments(store: Store, node_id: str) -> Callable[[], Awaitable[list[Assignment]]]:
    def read() -> list[Assignment]:
        models = {m.name: m for m in store.catalog.list()}
        out: list[Assignment] = []
        for r in store.replicas.list(node_id=node_id):
            out.append(Assignment(r, models.get(r.model)))
        return out

    async def run() -> list[Assignment]:
        return await asyncio.to_thread(read)

    return run


def agent_reporter(
    store: Store, clock: Clock, on_report: Callable[[], Awaitable[None]]
) -> Callable[[str, Status], Awaitable[None]]:
    """Writes the embedded agent's reports; `on_report` (the notifier's `settle`) then brings
    every process of the server up to date, as a remote agent's sync does: a request waiting in
    an extra worker's queue learns that its replica is ready now, not at that worker's next look
    at the store (`refresh_interval_s`)."""

    def write(replica_id: str, status: Status) -> None:
        store.replicas.update(
            replica_id,
            clock.now(),
            state=status.state,
            endpoint=status.endpoint,
            pid=status.pid,
            restarts=status.restarts,
            last_error=status.last_error,
        )

    async def run(replica_id: str, status: Status) -> None:
        await asyncio.to_thread(write, replica_id, status)
        await on_report()

    return run


def agent_forgetter(store: Store) -> Callable[[str], Awaitable[None]]:
    async def run(replica_id: str) -> None:
        await asyncio.to_thread(store.replicas.delete, replica_id)

    return run


def mcp_servers_reader(
    store: Store, node_id: str, leading: Callable[[], bool]
) -> Callable[[], Awaitable[list[McpServer] | None]]:
    """The stdio MCP servers the embedded node runs: those naming it, and those naming no node
    while this server leads."""

    def read() -> list[McpServer]:
        leads = leading()
        return [s for s in store.mcp_runs.stdio_servers() if runs_on(s, node_id, leads)]

    async def run() -> list[McpServer] | None:
        return await asyncio.to_thread(read)

    return run


def mcp_reporter(
    store: Store, clock: Clock, node_id: str, leading: Callable[[], bool],
    on_report: Callable[[], Awaitable[None]],
) -> Callable[[str, Status], Awaitable[None]]:
    """Writes the embedded node's stdio MCP runs, as `/agent/v1/mcp` does a remote node's: only
    of servers it runs now (a server that stopped leading says nothing more of its runs)."""

    def write(server: str, status: Status) -> bool:
        if not any(s.name == server and runs_on(s, node_id, leading())
                   for s in store.mcp_runs.stdio_servers()):
            return False
        return store.mcp_runs.report(McpRun(
            server=server, node_id=node_id, state=McpRunState(status.state.value),
            endpoint=status.endpoint, pid=status.pid, restarts=status.restarts,
            last_error=status.last_error), clock.now())

    async def run(server: str, status: Status) -> None:
        if await asyncio.to_thread(write, server, status):
            await on_report()

    return run


def mcp_forgetter(store: Store, node_id: str) -> Callable[[str], Awaitable[None]]:
    async def run(server: str) -> None:
        await asyncio.to_thread(store.mcp_runs.forget, server, node_id)

    return run


def both(*calls: Callable[[VerdictRecord], None]) -> Callable[[VerdictRecord], None]:
    """One callback that makes each of `calls` in turn (a verdict goes to the log and metrics)."""

    def call(record: VerdictRecord) -> None:
        for c in calls:
            c(record)

    return call


def verdict_writer(store: Store) -> Callable[[list[VerdictRecord]], Awaitable[None]]:
    async def run(records: list[VerdictRecord]) -> None:
        await asyncio.to_thread(store.guard.add_verdicts, records)

    return run


def audit_reader(store: Store) -> Callable[[AuditQuery], Awaitable[list[AuditEntry]]]:
    """The audit log as `GET /admin/v1/audit` reads it."""

    async def read(q: AuditQuery) -> list[AuditEntry]:
        return await asyncio.to_thread(lambda: store.audit.entries(
            since=q.since, who=q.who, kind=q.kind, target=q.target, limit=q.limit))

    return read


def audit_pruner(store: Store) -> Callable[[datetime], Awaitable[int]]:
    """Drops audit entries older than a time (the leader's retention duty), and with them the
    console sessions and sign-in windows that ended before it (their audit entries stay until
    then)."""

    def prune_all(before: datetime) -> int:
        store.sessions.prune(before)
        store.signins.prune(before)
        return store.audit.prune(before)

    async def prune(before: datetime) -> int:
        return await asyncio.to_thread(prune_all, before)

    return prune


def sso_client(sso: SsoSettings) -> OidcClient | None:
    """The console's relying party at the `[sso]` provider (None when SSO is off); its client
    secret is read from its file now, so a missing one stops the server at start."""
    if not sso.enabled:
        return None
    path = Path(sso.client_secret_file)
    try:
        secret = path.read_text(encoding="utf-8").splitlines()[0].strip()
    except (OSError, IndexError) as exc:
        raise ConfigError(f"[sso] client_secret_file {path} cannot be read, or is empty") from exc
    if not secret:
        raise ConfigError(f"[sso] client_secret_file {path} is empty")
    return OidcClient(None, sso.issuer, sso.client_id, secret, sso.redirect_url,
                      tuple(sso.scopes), groups_claim=sso.role_claim)
