"""Teams: creating, changing, listing and removing them, with what each has used."""

from __future__ import annotations

import asyncio

from llmgw.core.clock import Clock
from llmgw.core.protocol.keys import TeamOut, TeamRequest
from llmgw.core.types import Team
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store


class TeamAdmin(AdminService):
    """Teams live in the store; every server's limiter follows at its next refresh."""

    def __init__(self, store: Store, clock: Clock, on_change: OnChange | None = None) -> None:
        super().__init__(store, clock, on_change)

    async def teams(self) -> list[TeamOut]:
        return await asyncio.to_thread(self._shown, None)

    async def get(self, name: str) -> TeamOut:
        await asyncio.to_thread(self._store.teams.get, name)  # 404 for a team that is not
        return (await asyncio.to_thread(self._shown, name))[0]

    async def put(self, req: TeamRequest, by: str, *, replace: bool = False) -> TeamOut:
        team = Team(name=req.name, models=req.models, limits=req.limits, weight=req.weight,
                    note=req.note, tools=req.tools)
        await asyncio.to_thread(self._store.teams.put, team, by, self._clock.now(), replace=replace)
        await self._changed()
        return await self.get(req.name)

    async def remove(self, name: str) -> None:
        await asyncio.to_thread(self._store.teams.remove, name)
        await self._changed()

    def _shown(self, only: str | None) -> list[TeamOut]:
        """Teams with their live keys and the tokens their keys used today and this month."""
        teams = [t for t in self._store.teams.list() if only is None or t.name == only]
        keys = self._store.keys.list()
        now = self._clock.now()
        # By id: the keys of a removed team of the same name are none of this one's.
        members = {t.id: [k.id for k in keys if k.team_id == t.id] for t in teams}
        everyone = sorted({k for ids in members.values() for k in ids})
        today = self._store.usage.tokens_since(everyone, now.strftime("%Y-%m-%d"))
        month = self._store.usage.tokens_since(everyone, now.strftime("%Y-%m-01"))
        out = []
        for t in teams:
            ids = members[t.id]
            live = sum(1 for k in keys if k.team_id == t.id and not k.revoked
                       and (k.expires_at is None or k.expires_at > now))
            out.append(TeamOut(**dict(t), keys=live, tokens_today=sum(today.get(i, 0) for i in ids),
                               tokens_this_month=sum(month.get(i, 0) for i in ids)))
        return out
