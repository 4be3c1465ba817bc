"""The catalog service: adding, removing and scaling models, and explaining their placement."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import EllipsisType

from llmgw.control.demand import state
from llmgw.control.placement import NODE_TIMEOUT, free_on
from llmgw.control.scheduler import Verdict, explain
from llmgw.control.sizing import MemoryEstimate, estimate, fits
from llmgw.core.cache import CacheSpec
from llmgw.core.clock import Clock
from llmgw.core.demand import Activity, Evicted
from llmgw.core.errors import Conflict, InvalidRequest, LlmgwError
from llmgw.core.names import PROVIDER_KEY_RULE, provider_key_allowed
from llmgw.core.types import (
    Engine,
    Fit,
    LocalSource,
    Model,
    Node,
    RemoteSource,
    Replica,
    ReplicaState,
    Scaling,
)
from llmgw.node.files import local_model_file
from llmgw.node.gguf_info import read_info
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store


@dataclass(frozen=True)
class Resources:
    """What `ctl model resources` shows."""

    model: Model
    placement: list[Fit]
    replicas: list[Replica]
    nodes: list[Node]
    # Per profile, the memory estimate from the GGUF's header, when the file is on this machine.
    estimates: dict[str, MemoryEstimate] = field(default_factory=dict)
    # Recent swaps this model took part in: its replicas stopped for others, others' for it.
    evictions: list[Evicted] = field(default_factory=list)


def placement(
    model: Model,
    nodes: list[Node],
    replicas: list[Replica],
    estimates: Mapping[str, MemoryEstimate],
    now: datetime,
    node_timeout: timedelta = NODE_TIMEOUT,
    models: Sequence[Model] = (),
) -> list[Fit]:
    """For every profile of `model` and every node, in the scheduler's words: whether the model
    fits there (its own replicas not counted, so a running model is not reported as not fitting
    because of itself), how many of its replicas run there, and whether one more fits now.
    `models`: the catalog, for what the other replicas hold on their GPUs."""
    others = [r for r in replicas if r.model != model.name]
    running = Counter(
        r.node_id for r in replicas
        if r.model == model.name and r.node_id is not None and r.state != ReplicaState.STOPPING
    )
    by_id = {n.id: n for n in nodes}

    def detailed(v: Verdict, held: list[Replica]) -> str | None:
        est = estimates.get(v.profile)
        if v.reason is None or "GB memory" not in v.reason or est is None:
            return v.reason
        # Add which part of the estimate is too big, not just the total.
        detail = fits(est, max(free_on(by_id[v.node_id], held).memory_gb, 0))
        return f"{v.reason}; estimate {detail}" if detail else v.reason

    alone = explain(model, nodes, others, now, node_timeout, models)
    more = explain(model, nodes, replicas, now, node_timeout, models)
    result = []
    for a, m in zip(alone, more, strict=True):
        why, why_more = detailed(a, others), detailed(m, replicas)
        result.append(Fit(profile=a.profile, node_id=a.node_id, fits=why is None, reason=why,
                          running=running[a.node_id], one_more=why_more is None,
                          one_more_reason=why_more))
    return result


class CatalogService(AdminService):
    """Catalog changes made through the admin API; each records who made it."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        on_change: OnChange | None = None,
        locate: Callable[[Model], Path | None] = lambda _m: None,
        node_timeout: timedelta = NODE_TIMEOUT,
        model_roots: Sequence[Path] = (),
        provider_key_env: Collection[str] = (),
        read_activity: Callable[[], Awaitable[Activity]] | None = None,
    ) -> None:
        """`model_roots`: where local GGUF files may be (none: no local file is accepted);
        `provider_key_env`: variables remote keys may come from besides LLMGW_PROVIDER_*;
        `read_activity`: the live servers' merged demand, for each model's on-demand state.
        `on_change` is awaited after every change, so this server's routing table has it before
        we answer."""
        super().__init__(store, clock, on_change)
        self._read_activity = read_activity
        self._model_roots = list(model_roots)
        self._provider_key_env = frozenset(provider_key_env)
        self._locate = locate
        self._node_timeout = node_timeout

    async def models(self) -> list[Model]:
        return await asyncio.to_thread(self._store.catalog.list)

    async def get(self, name: str) -> Model:
        return await asyncio.to_thread(self._store.catalog.get, name)

    async def local_source(self, source: LocalSource, directory: bool = False) -> LocalSource:
        """The source with its canonical path, if it is a GGUF file (or, with `directory`, a
        directory) inside the model roots; one InvalidRequest for every other path, whatever
        the reason."""
        real = await asyncio.to_thread(local_model_file, source.path, self._model_roots, directory)
        return source.model_copy(update={"path": str(real)})

    async def add(self, model: Model, by: str) -> Model:
        """Add a model whose source passes the install's rules (the local file's path is stored
        canonical)."""
        src = model.source
        if isinstance(src, RemoteSource) and src.api_key_env is not None and not (
            provider_key_allowed(src.api_key_env, self._provider_key_env)
        ):
            raise InvalidRequest(f"source.api_key_env {PROVIDER_KEY_RULE}",
                                 param="source.api_key_env")
        if isinstance(src, LocalSource):
            # Only command engines read a directory (vLLM's, SGLang's weights); llama-server
            # reads one GGUF file.
            directory = all(p.engine == Engine.COMMAND for p in model.profiles)
            model = model.model_copy(update={"source": await self.local_source(src, directory)})
        routes = await asyncio.to_thread(self._store.routes.list)
        if any(r.name == model.name for r in routes):
            # A model of a route's name would take the name over from the route.
            raise Conflict(f"{model.name!r} is the name of a route; remove it first or pick "
                           "another name", param="name")
        added = await asyncio.to_thread(self._store.catalog.add, model, by, self._clock.now())
        await self._changed()
        return added

    async def remove(self, name: str) -> None:
        await asyncio.to_thread(self._store.catalog.remove, name)
        await self._changed()

    async def scale(
        self, name: str, minimum: int, maximum: int | None, by: str,
        idle_s: float | None | EllipsisType = ...,
    ) -> Model:
        """Set a model's replica bounds; `idle_s` (None: replicas above min stay) is kept as it
        was unless given. Without `maximum`, a model that had room to autoscale (max above min)
        keeps its max; one that had none gets max = min (at least 1, so that an on-demand model
        can start): scaling 3..3 down to `min 1` leaves one replica, not three."""
        current = await self.get(name)
        if current.guard and minimum == 0:
            # The guard's budget (a few seconds) cannot wait out a judge's cold start.
            raise InvalidRequest(f"{name} is a judge: it keeps at least one replica (min 1)",
                                 param="min")
        if maximum is not None:
            top = maximum
        elif current.scaling.max > current.scaling.min:
            top = max(current.scaling.max, minimum)
        else:
            top = max(minimum, 1)
        idle = current.scaling.idle_s if isinstance(idle_s, EllipsisType) else idle_s
        scaling = Scaling(min=minimum, max=top, idle_s=idle)
        changed = await asyncio.to_thread(
            self._store.catalog.set_scaling, name, scaling, by, self._clock.now()
        )
        await self._changed()
        return changed

    async def set_cache(self, name: str, cache: CacheSpec | None, by: str) -> Model:
        """Set a model's own response cache setting; None leaves it to the install's `[cache]`."""
        changed = await asyncio.to_thread(
            self._store.catalog.set_cache, name, cache, by, self._clock.now())
        await self._changed()
        return changed

    async def states(self, models: list[Model]) -> dict[str, str]:
        """Each model's on-demand state (cold, loading on NODE, ready, idle 3m, …)."""
        replicas = await self.replicas()
        activity = await self._read_activity() if self._read_activity else Activity()
        now = self._clock.now()
        return {m.name: state(m, replicas, activity, now) for m in models}

    async def replicas(self, model: str | None = None) -> list[Replica]:
        return await asyncio.to_thread(self._store.replicas.list, model)

    async def nodes(self) -> list[Node]:
        return await asyncio.to_thread(self._store.nodes.list)

    async def resources(self, name: str) -> Resources:
        """The model, where it fits and where one more replica of it would fit (see
        `placement`), its replicas, the nodes and the memory estimates."""
        model = await self.get(name)
        # Estimates first: reading a large GGUF's header takes a while, and nodes read before it
        # would look silent by the time the clock is read.
        estimates = await asyncio.to_thread(self._estimates, model)
        nodes = await self.nodes()
        everything = await self.replicas()
        catalog = await self.models()
        fit = placement(model, nodes, everything, estimates, self._clock.now(), self._node_timeout,
                        catalog)
        mine = [r for r in everything if r.model == name]
        swaps = [e for e in await asyncio.to_thread(self._store.install.evictions)
                 if name in (e.model, e.room_for)]
        return Resources(model, fit, mine, nodes, estimates, swaps)

    def _estimates(self, model: Model) -> dict[str, MemoryEstimate]:
        path = self._locate(model)
        if path is None:
            return {}
        try:
            info = read_info(path)
        except LlmgwError:
            return {}
        return {p.name: estimate(info, p.args) for p in model.profiles}
