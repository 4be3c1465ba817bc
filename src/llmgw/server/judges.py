"""Wiring the judge keeper and the judge status view to this server's store and services."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from llmgw.control.catalog import CatalogService
from llmgw.control.judge_keeper import KeeperState, KeeperView
from llmgw.control.judge_loop import JudgeKeeper
from llmgw.control.judge_scaling import JUDGE_IDLE, JUDGE_SCALE_WINDOW, JudgeScale
from llmgw.control.placement import free_on
from llmgw.control.scheduler import Cluster, Placement
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core.clock import Clock
from llmgw.core.demand import Activity
from llmgw.core.guard import JudgeLoad
from llmgw.core.judges import KNOWN
from llmgw.core.protocol.guard import JudgeStatusOut
from llmgw.core.protocol.models import ServeRequest
from llmgw.core.types import Profile, ReplicaState
from llmgw.guard.capacity import Capacity, capacities
from llmgw.store.lease_repo import Fence
from llmgw.store.store import Store


def keeper(
    store: Store, jobs: ServeJobs, catalog: CatalogService, clock: Clock, grace_s: float,
    on_change: Callable[[], Awaitable[None]], fence: Callable[[], Fence | None],
    server_id: str = "", leading: Callable[[], bool] = lambda: True,
    server_timeout: timedelta = timedelta(seconds=30), on_scale: Callable[[], None] = lambda: None,
    scale_window: timedelta = JUDGE_SCALE_WINDOW, scale_idle: timedelta = JUDGE_IDLE,
) -> JudgeKeeper:
    """A judge keeper reading this install's store and acting through its services; its
    writes are fenced, so a deposed leader cannot serve or refit a judge. It publishes its
    state to the store, where every server's judge status reads it. It reads the live servers'
    judge admission (their activity) to scale the judges; `on_scale` wakes the replica keeper."""

    def read_store() -> KeeperView:
        selector = store.install.judge_node_selector()
        every_node = store.nodes.list()
        # Judges are sized for the machines they may run on.
        nodes = [n for n in every_node if all(n.labels.get(k) == v for k, v in selector.items())]
        replicas = store.replicas.list()
        models = store.catalog.list()
        now = clock.now()
        # Whether one more replica of each judge would be placed now, as the replica keeper
        # places judges (anywhere, the judge machine first when the install has one).
        cluster = Cluster(every_node, replicas, now, judge_machine=selector or None,
                          models=models)
        room = {m.name: isinstance(cluster.schedule(m), Placement)
                for m in models if m.guard and not m.is_remote}
        starting: dict[str, int] = {}
        for r in replicas:
            if r.state in (ReplicaState.PENDING, ReplicaState.STARTING):
                starting[r.model] = starting.get(r.model, 0) + 1
        gpus: dict[str, int] = {}
        for n in nodes:
            for cls, free in free_on(n, replicas).gpus.items():
                gpus[cls] = gpus.get(cls, 0) + max(free, 0)
        ids: dict[str, list[str]] = {}
        for r in replicas:
            if r.state != ReplicaState.STOPPING:
                ids.setdefault(r.model, []).append(r.id)
        return KeeperView(
            leader=leading(),
            guard_on=store.guard.switches().get("guard_enabled", False),
            policies=store.guard.policies(),
            models=models,
            known=KNOWN,
            enabled={j.name: j for j in store.guard.enabled_judges()},
            node_cores=[n.cores for n in nodes],
            gpu_free_by_class=gpus,
            replica_ids=ids,
            judge_node_selector=selector,
            grace=timedelta(seconds=grace_s),
            judge_loads=store.servers.activity(now, server_timeout).judges,
            starting=starting,
            room=room,
            scale_window=scale_window,
            scale_idle=scale_idle,
        )

    async def read() -> KeeperView:
        view = await asyncio.to_thread(read_store)
        return replace(view, jobs=await jobs.jobs())

    async def serve(request: ServeRequest) -> object:
        return await jobs.start(request, fence())

    async def refit(model: str, profiles: list[Profile], by: str) -> object:
        await asyncio.to_thread(store.catalog.set_profiles, model, profiles, by, clock.now(), fence())
        await on_change()
        return None

    async def restart(ids: list[str]) -> object:
        def write() -> None:
            f = fence()
            for rid in ids:  # the replica keeper places new ones on the new profile
                store.replicas.update(rid, clock.now(), f, state=ReplicaState.STOPPING)

        await asyncio.to_thread(write)
        await on_change()
        return None

    async def publish(state: KeeperState) -> object:
        await asyncio.to_thread(store.install.set_judge_keeper_state,
                                dump_state(state, server_id, clock.now()), fence())
        return None

    return JudgeKeeper(read, serve, refit, restart, clock, publish=publish, on_scale=on_scale)


def dump_state(state: KeeperState, server_id: str, at: datetime) -> dict[str, Any]:
    """The part of the keeper's state its status needs, as stored for the other servers."""
    return {
        "server": server_id,
        "at": at.isoformat(),
        "first": state.first.isoformat() if state.first else None,
        "tried": {name: t.isoformat() for name, t in state.tried.items()},
        "broken": sorted(state.broken),
        "scales": {name: {"replicas": sc.replicas, "note": sc.note}
                   for name, sc in state.scales.items()},
    }


def load_state(stored: dict[str, Any]) -> KeeperState:
    """A keeper state as `dump_state` stored it."""
    first = stored.get("first")
    return KeeperState(
        first=datetime.fromisoformat(first) if first else None,
        tried={name: datetime.fromisoformat(t) for name, t in stored.get("tried", {}).items()},
        broken=frozenset(stored.get("broken", [])),
        scales={name: JudgeScale(replicas=int(sc.get("replicas", 0)), note=str(sc.get("note", "")))
                for name, sc in stored.get("scales", {}).items()},
    )


def status(
    store: Store, judge_keeper: JudgeKeeper, clock: Clock, leading: Callable[[], bool] = lambda: True,
    server_id: str = "", server_timeout: timedelta = timedelta(seconds=30),
) -> Callable[[], Awaitable[list[JudgeStatusOut]]]:
    """Per judge: known or enabled, in the catalog, replicas ready, keeper state, latency, its
    admission now (queue, slots, over the live servers), what it sustained within budget and
    sheds over the last minutes (`capacity`), and its scale.

    The keeper runs on the leader only: a server that does not lead shows the leader keeper's
    state as the leader last published it, naming that server (`keeper_server`)."""

    def read() -> tuple[list[Any], list[Any], list[Any], list[Any], dict[str, Any] | None,
                        Activity, dict[str, int]]:
        now = clock.now()
        return (store.catalog.list(), store.replicas.list(), store.guard.enabled_judges(),
                store.guard.verdicts(limit=5000), store.install.judge_keeper_state(),
                store.servers.activity(now, server_timeout),
                {p.name: p.budget_ms for p in store.guard.policies()})

    async def run() -> list[JudgeStatusOut]:
        models, replicas, enabled, verdicts, stored, activity, budgets = await asyncio.to_thread(read)
        if leading():
            states = await judge_keeper.status()
            keeper_state = judge_keeper.state
            kept_by: str | None = server_id
        else:
            # Nothing published yet reads as a keeper that has not looked yet.
            keeper_state = load_state(stored) if stored else KeeperState()
            states = await judge_keeper.status(keeper_state)
            kept_by = stored.get("server") if stored else None
        recent = capacities(verdicts, budgets, clock.now())
        catalog = {m.name: m for m in models}
        names = sorted(set(states) | {m.name for m in models if m.guard} | {j.name for j in enabled})
        out = []
        for name in names:
            spec = KNOWN.get(name) or next((j for j in enabled if j.name == name), None)
            latencies = sorted(v.latency_ms for v in verdicts if v.judge == name
                               and v.outcome.value in ("safe", "unsafe"))
            load = activity.judges.get(name, JudgeLoad())
            cap = recent.get(name, Capacity())
            scale = keeper_state.scales.get(name)
            out.append(JudgeStatusOut(
                judge=name,
                source="known" if name in KNOWN else "enabled" if spec else "catalog only",
                note=spec.note if spec else "",
                format=spec.format if spec else None,
                in_catalog=name in catalog,
                replicas_ready=sum(1 for r in replicas
                                   if r.model == name and r.state == ReplicaState.READY),
                keeper=states.get(name, "in catalog" if name in catalog else "not named by a policy"),
                keeper_server=kept_by,
                p50_ms=_pct(latencies, 0.50),
                p99_ms=_pct(latencies, 0.99),
                judgments=len(latencies),
                queue_depth=load.queued,
                in_flight=load.in_flight,
                slots=load.slots,
                judged_5m=cap.judgments,
                shed_5m=cap.shed,
                sustained_per_s=cap.sustained_per_s,
                replicas_wanted=scale.replicas if scale else None,
                replicas_max=catalog[name].scaling.max if name in catalog else None,
                scaling=scale.note if scale else "",
            ))
        return out

    return run


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]
