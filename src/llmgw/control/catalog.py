"""The catalog service: adding, removing and scaling models, and explaining their placement."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from llmgw.control.placement import NODE_TIMEOUT, free_on
from llmgw.control.scheduler import explain
from llmgw.control.sizing import MemoryEstimate, estimate, fits
from llmgw.core.clock import Clock
from llmgw.core.errors import LlmgwError
from llmgw.core.types import Model, Node, Replica, Scaling
from llmgw.node.gguf_info import read_info
from llmgw.store.store import Store


@dataclass(frozen=True)
class Fit:
    """Whether one profile fits on one node right now, and why not."""

    profile: str
    node_id: str
    fits: bool
    reason: str | None


@dataclass(frozen=True)
class Resources:
    """What `ctl model resources` shows."""

    model: Model
    placement: list[Fit]
    replicas: list[Replica]
    nodes: list[Node]
    # Per profile, the memory estimate from the GGUF's header, when the file is on this machine.
    estimates: dict[str, MemoryEstimate] = field(default_factory=dict)


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
        """The model, where one more replica of it would fit (the scheduler's own reasons, for
        every profile and node), its replicas, the nodes and the memory estimates."""
        model = await self.get(name)
        nodes = await self.nodes()
        everything = await self.replicas()
        estimates = await asyncio.to_thread(self._estimates, model)
        by_id = {n.id: n for n in nodes}
        placement: list[Fit] = []
        for v in explain(model, nodes, everything, self._clock.now(), self._node_timeout):
            why = v.reason
            est = estimates.get(v.profile)
            if why is not None and "GB memory" in why and est is not None:
                # Add which part of the estimate is too big, not just the total.
                free = free_on(by_id[v.node_id], everything).memory_gb
                detail = fits(est, max(free, 0))
                why = f"{why}; estimate {detail}" if detail else why
            placement.append(Fit(v.profile, v.node_id, why is None, why))
        mine = [r for r in everything if r.model == name]
        return Resources(model, placement, mine, nodes, estimates)

    def _estimates(self, model: Model) -> dict[str, MemoryEstimate]:
        path = self._locate(model)
        if path is None:
            return {}
        try:
            info = read_info(path)
        except LlmgwError:
            return {}
        return {p.name: estimate(info, p.args) for p in model.profiles}
