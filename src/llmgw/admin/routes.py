"""Adding, changing, listing and removing routes, and each target's state on this server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from llmgw.core.clock import Clock
from llmgw.core.errors import Conflict, InvalidRequest
from llmgw.core.protocol.routes import RouteOut, TargetStatusOut
from llmgw.core.routes import RouteSpec
from llmgw.gateway.upstream.router import Router
from llmgw.gateway.upstream.table import RoutingTable
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store


class RouteAdmin(AdminService):
    """Routes live in the store; every server's routing follows at its next refresh."""

    def __init__(self, store: Store, clock: Clock, router: Router,
                 table: Callable[[], RoutingTable],
                 on_change: OnChange | None = None) -> None:
        super().__init__(store, clock, on_change)
        self._router = router
        self._table = table

    async def routes(self) -> list[RouteOut]:
        return [self.shown(r) for r in await asyncio.to_thread(self._store.routes.list)]

    async def get(self, name: str) -> RouteOut:
        return self.shown(await asyncio.to_thread(self._store.routes.get, name))

    async def put(self, spec: RouteSpec, by: str, *, replace: bool = False) -> RouteOut:
        """Add a route (or change one, with `replace`): its name is no catalog model's, and each
        target is a catalog model (not another route: a route's targets are what it resolves to)."""
        models = {m.name for m in await asyncio.to_thread(self._store.catalog.list)}
        if spec.name in models:
            raise Conflict(f"{spec.name!r} is a catalog model's name; a route needs a name of its "
                           "own", param="name")
        missing = [t.model for t in spec.targets if t.model not in models]
        if missing:
            raise InvalidRequest(f"targets not in the catalog: {', '.join(missing)}",
                                 param="targets")
        saved = await asyncio.to_thread(self._store.routes.put, spec, by, self._clock.now(),
                                        replace=replace)
        await self._changed()
        return self.shown(saved)

    async def remove(self, name: str) -> None:
        await asyncio.to_thread(self._store.routes.remove, name)
        self._router.forget(name)
        await self._changed()

    def shown(self, spec: RouteSpec) -> RouteOut:
        """`spec` with its targets' state on this server now."""
        table, now = self._table(), self._clock.monotonic()
        status = []
        for t in spec.targets:
            route = table.routes.get(t.model)
            health = self._router.cooldowns.get(spec.name, t.model)
            status.append(TargetStatusOut(
                model=t.model, weight=t.weight, in_catalog=route is not None,
                ready=route.answering(time.monotonic()) if route is not None else 0,
                in_flight=sum(u.outstanding for u in route.upstreams) if route is not None else 0,
                recent_failures=len(health.failures),
                cooling_down_s=round(max(health.until - now, 0.0), 3)))
        return RouteOut(**dict(spec), status=status)
