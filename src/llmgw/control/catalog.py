"""The catalog service: adding, removing and scaling models, and explaining their placement."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from llmgw.control.placement import NODE_TIMEOUT, free_on
from llmgw.control.scheduler import explain
from llmgw.control.sizing import MemoryEstimate, estimate, fits
from llmgw.core.clock import Clock
from llmgw.core.errors import InvalidRequest, LlmgwError
from llmgw.core.names import PROVIDER_KEY_RULE, provider_key_allowed
from llmgw.core.types import LocalSource, Model, Node, RemoteSource, Replica, Scaling
from llmgw.node.files import local_model_file
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
        model_roots: Sequence[Path] = (),
        provider_key_env: Collection[str] = (),
    ) -> None:
        """`model_roots`: where local GGUF files may be (none: no local file is accepted);
        `provider_key_env`: variables remote keys may come from besides LLMGW_PROVIDER_*."""
        self._store = store
        self._clock = clock
        self._model_roots = list(model_roots)
        self._provider_key_env = frozenset(provider_key_env)
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

    async def local_source(self, source: LocalSource) -> LocalSource:
        """The source with its canonical path, if it is a GGUF file inside the model roots;
        one InvalidRequest for every other path, whatever the reason."""
        real = await asyncio.to_thread(local_model_file, source.path, self._model_roots)
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
            model = model.model_copy(update={"source": await self.local_source(src)})
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
