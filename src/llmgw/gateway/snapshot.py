"""The request path's view of the store, rebuilt only when the store's revision changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from llmgw.core import judges
from llmgw.core.agent_wire import on_address
from llmgw.core.engine_keys import EngineKeys
from llmgw.core.errors import ConfigError, ModelNotFound
from llmgw.core.loops import every
from llmgw.core.mcp import McpRun, McpServer
from llmgw.core.routes import RouteSpec
from llmgw.core.types import (
    ApiKey,
    Engine,
    Limits,
    Model,
    Profile,
    RemoteSource,
    Replica,
    ReplicaState,
    Team,
)
from llmgw.engines import llamacpp, remote
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.chain import Chain
from llmgw.gateway.upstream.choice import choose
from llmgw.gateway.upstream.table import (
    RoutingTable,
    Serving,
    Upstream,
    failing_reason,
    loading_on,
    nowhere_reason,
    unavailable_reason,
)
from llmgw.guard.enforcement import GuardView
from llmgw.guard.judge_client import JudgeTarget
from llmgw.store.store import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    revision: int
    keys: KeyCache
    table: RoutingTable
    guard: GuardView = GuardView()
    default_limits: Limits = Limits()
    # Routes by name: public names in front of catalog models.
    route_specs: dict[str, RouteSpec] = field(default_factory=dict)
    # The response cache's epochs by name (`InstallRepo.cache_epochs`): a purge starts a new one.
    cache_epochs: dict[str, str] = field(default_factory=dict)
    # Whether any model or route sets its own cache: when none does and `[cache]` is off, a
    # request costs the cache nothing.
    caching: bool = False
    # What each served name (a catalog model, or a route by a name no model has) runs: only
    # the stages that apply to it (`chain`), built with the snapshot.
    chains: Mapping[str, Chain] = field(default_factory=dict)
    # Upstream MCP servers by name (`gateway.mcp`), and the ready runs of the stdio ones
    # (where a node's bridge serves each).
    mcp_servers: Mapping[str, McpServer] = field(default_factory=dict)
    mcp_runs: Mapping[str, McpRun] = field(default_factory=dict)


# Builds the chain of every served name of a snapshot (the gateway's `chains`).
Chains = Callable[[Snapshot], Mapping[str, Chain]]


def build_routes(
    models: list[Model], replicas: list[Replica], previous: dict[str, Upstream],
    engine_keys: EngineKeys | None = None,
    provider_key_env: Collection[str] = (), *, addresses: dict[str, str],
) -> dict[str, Serving]:
    """Routes for every catalog model; Upstream objects are reused by id to keep their counters.
    `engine_keys` authenticate this server to each replica's engine with its node's own key
    (None: engines need no key); `provider_key_env` lists the variables remote keys may come
    from besides LLMGW_PROVIDER_*; `addresses` (node id to address) are where engines listen: a
    replica's endpoint elsewhere is no upstream."""

    def upstream(uid: str, base_url: str, headers: dict[str, str], slots: int = 0) -> Upstream:
        up = previous.get(uid)
        if up is None or up.base_url != base_url or up.headers != headers:
            return Upstream(uid, base_url, headers, slots=slots)
        up.slots = slots
        return up

    routes: dict[str, Serving] = {}
    for m in models:
        if isinstance(m.source, RemoteSource):
            try:
                headers = remote.auth_headers(m.source, provider_key_env)
            except ConfigError as exc:
                routes[m.name] = Serving(m, (), unavailable=exc.message)
                continue
            up = upstream(f"remote:{m.name}", remote.endpoint(m.source), headers)
            routes[m.name] = Serving(m, (up,), upstream_model=m.source.model)
            continue
        mine = [r for r in replicas if r.model == m.name and r.state != ReplicaState.STOPPING]
        profiles = {p.name: p for p in m.profiles}
        ready = tuple(
            upstream(r.id, r.endpoint, engine_keys.headers(r.node_id or "") if engine_keys else {},
                     _slots(profiles.get(r.profile or "")))
            for r in mine
            if r.state == ReplicaState.READY and r.endpoint and _placed(r, r.endpoint, addresses)
        )
        if ready:
            routes[m.name] = Serving(m, ready)
            continue
        why = unavailable_reason(mine, m.scaling)
        if any(r.state == ReplicaState.READY and r.endpoint for r in mine):
            why = "a replica reported ready off its node's address, where nothing is sent"
        routes[m.name] = Serving(m, ready, unavailable=why, loading_on=loading_on(mine),
                               nowhere=nowhere_reason(mine), failing=failing_reason(mine))
    return routes


def _slots(profile: Profile | None) -> int:
    """A replica's slots: its llama-server's `--parallel`, or llama-server's own default; 0
    (not known) for another engine."""
    if profile is None or profile.engine != Engine.LLAMACPP:
        return 0
    return llamacpp.slots(profile) or llamacpp.DEFAULT_SLOTS


def _placed(replica: Replica, endpoint: str, addresses: dict[str, str]) -> bool:
    """Whether the replica listens on the address of the node it was placed on: user requests
    and the engine key go nowhere else, whatever a node reported."""
    address = addresses.get(replica.node_id or "")
    return address is not None and on_address(endpoint, address)


class Refresher:
    """Holds the current Snapshot and swaps in a new one when the revision moves."""

    def __init__(self, store: Store, secret: bytes, engine_keys: EngineKeys | None = None,
                 provider_key_env: Collection[str] = (), *,
                 on_refresh: Callable[[RoutingTable], None] | None = None) -> None:
        self._store = store
        # Told of every new routing table (the request queue releases its waiters with it).
        self._on_refresh = on_refresh
        self._provider_key_env = frozenset(provider_key_env)
        self._secret = secret
        self._engine_keys = engine_keys
        self.current = Snapshot(-1, KeyCache(secret, []), RoutingTable({}))
        # Judge replicas' slots (`--parallel` of the profile each runs), by replica id.
        self._judge_slots: dict[str, int | None] = {}
        # How many judgments each runs at once, where fewer than its slots (`llamacpp.lanes`).
        self._judge_lanes: dict[str, int | None] = {}
        self.wake = asyncio.Event()
        self._chains: Chains | None = None  # none until the gateway gives them
        # The loop and admin writes both refresh; one at a time, so an older read can never
        # replace a newer snapshot.
        self._lock = asyncio.Lock()

    def _load(
        self,
    ) -> tuple[int, list[ApiKey], list[Model], list[Replica], dict[str, str], GuardView, Limits,
               list[RouteSpec], list[Team], dict[str, str], list[McpServer],
               dict[str, McpRun]]:
        # Revision first: a change landing between the reads shows up as a newer revision
        # on the next look, never as a missed one.
        revision = self._store.revision()
        switches = self._store.guard.switches()
        guard = GuardView(
            enabled=switches.get("guard_enabled", False),
            log_prompts=switches.get("log_prompts", False),
            policies=tuple(self._store.guard.policies()),
            judges={**judges.KNOWN, **{j.name: j for j in self._store.guard.enabled_judges()}},
        )
        return (
            revision,
            self._store.keys.list(),
            self._store.catalog.list(),
            self._store.replicas.list(),
            {n.id: n.address for n in self._store.nodes.list()},
            guard,
            self._store.keys.default_limits(),
            self._store.routes.list(),
            self._store.teams.list(),
            self._store.install.cache_epochs(),
            self._store.mcp.list(),
            self._store.mcp_runs.ready(),
        )

    async def refresh(self) -> bool:
        """Rebuild if the store changed; True when it did."""
        async with self._lock:
            return await self._refresh()

    async def _refresh(self) -> bool:
        revision = await asyncio.to_thread(self._store.revision)
        if revision == self.current.revision:
            return False
        (revision, keys, models, replicas, addresses, guard, limits, specs, teams, epoch, mcp,
         runs) = \
            await asyncio.to_thread(self._load)
        previous = {u.id: u for r in self.current.table.routes.values() for u in r.upstreams}
        routes = build_routes(models, replicas, previous, self._engine_keys,
                              self._provider_key_env, addresses=addresses)
        table = RoutingTable(routes)
        profiles = {(m.name, p.name): p for m in models if m.guard for p in m.profiles}
        judging = [(r.id, profiles[(r.model, r.profile or "")]) for r in replicas
                   if (r.model, r.profile or "") in profiles]
        self._judge_slots = {rid: llamacpp.slots(p) for rid, p in judging}
        self._judge_lanes = {rid: llamacpp.lanes(p) for rid, p in judging}
        self.current = self._chained(Snapshot(
            revision, KeyCache(self._secret, keys, teams), table, guard, limits,
            {r.name: r for r in specs}, epoch,
            any(m.cache is not None for m in models) or any(r.cache is not None for r in specs),
            mcp_servers={s.name: s for s in mcp}, mcp_runs=runs))
        if self._on_refresh is not None:
            self._on_refresh(table)
        return True

    def stage_with(self, chains: Chains) -> None:
        """Build each served name's chain with `chains` from now on, starting with the snapshot
        held now."""
        self._chains = chains
        self.current = self._chained(self.current)

    def _chained(self, snap: Snapshot) -> Snapshot:
        return snap if self._chains is None else replace(snap, chains=self._chains(snap))

    def judge_ready(self, name: str) -> bool:
        """Whether judge `name` has a ready replica in the current snapshot."""
        route = self.current.table.routes.get(name)
        return route is not None and bool(route.upstreams)

    def locate_judge(self, name: str) -> list[JudgeTarget]:
        """The ready replicas of judge `name` with their slots (for the judge client, which
        admits judgments to them); NoReadyReplica with the reason when there is none."""
        snap = self.current
        spec = snap.guard.judges.get(name)
        if spec is None:
            raise ModelNotFound(f"judge '{name}' is not known; enable it with `llmgw ctl guard "
                                "judge enable --repo`", param="judges")
        route = snap.table.resolve(name)
        if not route.upstreams:
            choose(route)  # raises with the reason
        return [JudgeTarget(spec=spec, base_url=up.base_url.removesuffix("/v1"), headers=up.headers,
                            id=up.id, slots=self._judge_slots.get(up.id),
                            lanes=self._judge_lanes.get(up.id), used=up.touch)
                for up in route.upstreams]

    async def run(self, interval_s: float) -> None:
        """Poll the revision; a store outage keeps serving from the last snapshot."""
        await every(interval_s, self.wake, self.refresh,
                    "cache refresh (serving from the last snapshot)", logger)
