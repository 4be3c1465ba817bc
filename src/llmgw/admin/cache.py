"""The response cache for admins: what it holds and spared, and purging it."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import timedelta

from llmgw.core.cache import CacheSpec
from llmgw.core.clock import Clock
from llmgw.core.protocol.cache import CacheModelStats, CacheStatsOut, PurgeOut
from llmgw.gateway.cache.service import ResponseCache
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store


class CacheAdmin(AdminService):
    """Reads usage from the store and entries from the cache's own store."""

    def __init__(self, store: Store, clock: Clock, cache: ResponseCache,
                 on_change: OnChange | None = None) -> None:
        super().__init__(store, clock, on_change)
        self._cache = cache

    async def stats(self, days: int) -> CacheStatsOut:
        """Requests, hits and saved tokens per model over `days` (today the last), with the
        answers kept now and the mode each model's (or route's) requests get."""
        since = (self._clock.now() - timedelta(days=days - 1)).strftime("%Y-%m-%d")
        rows = await asyncio.to_thread(self._store.usage.usage, None, None, since)
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in rows:
            t = totals[r.model]
            t[0] += r.requests
            t[1] += r.cache_hits
            t[2] += r.saved_tokens
        entries = await self._cache.store.count()
        own = await asyncio.to_thread(self._own)
        mode = self._cache.settings.mode
        models = []
        for name in sorted({*totals, *entries, *own}):
            requests, hits, saved = totals.get(name, [0, 0, 0])
            spec = own.get(name)
            models.append(CacheModelStats(
                model=name, mode=spec.mode if spec is not None and spec.mode is not None else mode,
                own=spec, requests=requests, hits=hits,
                hit_rate=round(hits / requests, 4) if requests else 0.0, saved_tokens=saved,
                entries=entries.get(name, 0)))
        return CacheStatsOut(mode=mode, store=self._cache.store.kind, since=since, models=models)

    def _own(self) -> dict[str, CacheSpec]:
        """The models' and routes' own cache settings (a model's wins over a route of its name,
        as on the data plane)."""
        routes = {r.name: r.cache for r in self._store.routes.list() if r.cache is not None}
        return routes | {m.name: m.cache for m in self._store.catalog.list() if m.cache is not None}

    async def purge(self, model: str | None) -> PurgeOut:
        """Drop the answers kept for `model` (None: every answer): at once from this server's
        store (Redis: everyone's), and from every other worker's memory at its next refresh,
        through a new epoch in the store that leaves them out of reach meanwhile."""
        await asyncio.to_thread(self._store.install.new_cache_epoch, model)
        purged = await self._cache.store.purge(model)
        await self._changed()
        return PurgeOut(model=model, purged=purged)
