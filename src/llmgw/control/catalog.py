"""The catalog service: adding, removing and scaling models, and explaining their placement."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from llmgw.control.placement import NODE_TIMEOUT, free_on
from llmgw.control.scheduler import Verdict, explain
from llmgw.control.sizing import MemoryEstimate, estimate, fits
from llmgw.core.clock import Clock
from llmgw.core.errors import LlmgwError
from llmgw.core.types import Model, Node, Replica, ReplicaState, Scaling
from llmgw.node.gguf_info import read_info
from llmgw.store.store import Store


@dataclass(frozen=True)
class Fit:
    """One profile of a model on one node, as an operator asks about it: does the model fit
    there, does it run there, and would one more replica fit there now."""

    profile: str
    node_id: str
    # Whether the model fits the node with its own replicas not counted against it: a node
    # that runs it fits it. `reason` says why not.
    fits: bool
    reason: str | None
    # Replicas of the model on the node, stopping ones aside.
    running: int
    # Whether one more replica fits now, everything counted: the scheduler's answer for a
    # pending replica. `one_more_reason` says why not.
    one_more: bool
    one_more_reason: str | None


@dataclass(frozen=True)
class Resources:
    """What `ctl model resources` shows."""

    model: Model
    placement: list[Fit]
    replicas: list[Replica]
    nodes: list[Node]
    # Per profile, the memory estimate from the GGUF's header, when the file is on this machine.
    estimates: dict[str, MemoryEstimate] = field(default_factory=dict)


def placement(
    model: Model,
    nodes: list[Node],
    replicas: list[Replica],
    estimates: Mapping[str, MemoryEstimate],
    now: datetime,
    node_timeout: timedelta = NODE_TIMEOUT,
) -> list[Fit]:
    """For every profile of `model` and every node, in the scheduler's words: whether the model
    fits there (its own replicas not counted, so a running model is not reported as not fitting
    because of itself), how many of its replicas run there, and whether one more fits now."""
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

    alone = explain(model, nodes, others, now, node_timeout)
    more = explain(model, nodes, replicas, now, node_timeout)
    result = []
    for a, m in zip(alone, more, strict=True):
        why, why_more = detailed(a, others), detailed(m, replicas)
        result.append(Fit(a.profile, a.node_id, why is None, why, running[a.node_id],
                          why_more is None, why_more))
    return result


class CatalogService:
    """Catalog changes made through the admin API; each records who made it."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        on_change: Callable[[], Awaitable[None]] | None = None,
        locate: Callable[[Model], Path | None] = lambda _m: None,
        node_timeout: timedelta = NODE_TIMEOUT,
    ) -> None:
        self._store = store
        self._clock = clock
        self._locate = locate
        self._node_timeout = node_timeout
        # Awaited after every change, so this server's routing table has it before we answer.
        self._on_change = on_change

    async def _changed(self) -> None:
        if self._on_change is not None:
            await self._on_change()

    async def models(self) -> list[Model]:
        return await asyncio.to_thread(self._store.catalog.list)

    async def get(self, name: str) -> Model:
        return await asyncio.to_thread(self._store.catalog.get, name)

    async def add(self, model: Model, by: str) -> Model:
        added = await asyncio.to_thread(self._store.catalog.add, model, by, self._clock.now())
        await self._changed()
        return added

    async def remove(self, name: str) -> None:
        await asyncio.to_thread(self._store.catalog.remove, name)
        await self._changed()

    async def scale(self, name: str, minimum: int, maximum: int | None, by: str) -> Model:
        current = await self.get(name)
        top = maximum if maximum is not None else max(current.scaling.max, minimum)
        scaling = Scaling(min=minimum, max=top)
        changed = await asyncio.to_thread(
            self._store.catalog.set_scaling, name, scaling, by, self._clock.now()
        )
        await self._changed()
        return changed

    async def replicas(self, model: str | None = None) -> list[Replica]:
        return await asyncio.to_thread(self._store.replicas.list, model)

    async def nodes(self) -> list[Node]:
        return await asyncio.to_thread(self._store.nodes.list)

    async def resources(self, name: str) -> Resources:
        """The model, where it fits and where one more replica of it would fit (see
        `placement`), its replicas, the nodes and the memory estimates."""
        model = await self.get(name)
        nodes = await self.nodes()
        everything = await self.replicas()
        estimates = await asyncio.to_thread(self._estimates, model)
        fit = placement(model, nodes, everything, estimates, self._clock.now(), self._node_timeout)
        mine = [r for r in everything if r.model == name]
        return Resources(model, fit, mine, nodes, estimates)

    def _estimates(self, model: Model) -> dict[str, MemoryEstimate]:
        path = self._locate(model)
        if path is None:
            return {}
        try:
            info = read_info(path)
        except LlmgwError:
            return {}
        return {p.name: estimate(info, p.args) for p in model.profiles}
