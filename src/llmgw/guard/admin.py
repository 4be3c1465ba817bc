"""Guard administration: policies, the guard switches, judges enabled by repo, the verdict log."""

from __future__ import annotations

import asyncio
from datetime import datetime

from llmgw.core.clock import Clock
from llmgw.core.errors import InvalidRequest, NotFound
from llmgw.core.guard import JudgeSpec, Policy, VerdictRecord
from llmgw.core.judges import KNOWN, check_enabled
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store


class GuardAdmin(AdminService):
    """Changes made through the admin API; each bumps the revision so caches pick it up."""

    def __init__(self, store: Store, clock: Clock, on_change: OnChange | None = None) -> None:
        super().__init__(store, clock, on_change)

    async def policies(self) -> list[Policy]:
        return await asyncio.to_thread(self._store.guard.policies)

    async def policy(self, name: str) -> Policy:
        for p in await self.policies():
            if p.name == name:
                return p
        raise NotFound(f"policy {name!r} does not exist", param="name")

    async def set_policy(self, policy: Policy, by: str) -> Policy:
        known = set(KNOWN) | {j.name for j in await self.enabled_judges()}
        unknown = [j for j in policy.judges if j not in known]
        if unknown:
            raise InvalidRequest(
                f"unknown judge(s) {', '.join(unknown)}: use one of {', '.join(sorted(known))}, or "
                "enable one with `llmgw ctl guard judge enable --repo`",
                param="judges",
            )
        await asyncio.to_thread(self._store.guard.set_policy, policy, by, self._clock.now())
        await self._changed()
        return await self.policy(policy.name)

    async def remove_policy(self, name: str) -> None:
        await asyncio.to_thread(self._store.guard.remove_policy, name)
        await self._changed()

    async def switches(self) -> dict[str, bool]:
        return await asyncio.to_thread(self._store.guard.switches)

    async def set_switch(self, name: str, on: bool) -> dict[str, bool]:
        await asyncio.to_thread(self._store.guard.set_switch, name, on)
        await self._changed()
        return await self.switches()

    async def enabled_judges(self) -> list[JudgeSpec]:
        return await asyncio.to_thread(self._store.guard.enabled_judges)

    async def enable_judge(self, spec: JudgeSpec, by: str) -> JudgeSpec:
        check_enabled(spec)
        if spec.name in KNOWN:
            raise InvalidRequest(f"{spec.name} is a judge llmgw knows already; name it in a policy",
                                 param="name")
        await asyncio.to_thread(self._store.guard.enable_judge, spec, by, self._clock.now())
        await self._changed()
        return spec

    async def verdicts(
        self, *, since: datetime | None, policy: str | None, judge: str | None, outcome: str | None,
        limit: int, request_id: str | None = None,
    ) -> list[VerdictRecord]:
        return await asyncio.to_thread(
            lambda: self._store.guard.verdicts(
                since=since, policy=policy, judge=judge, outcome=outcome, request_id=request_id,
                limit=limit,
            )
        )
