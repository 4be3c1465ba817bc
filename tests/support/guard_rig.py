"""The guard as the request path runs it (the real `Guard` and `JudgeClient`) against fake judge
engines (`tests.fakes.judge.FakeJudge`), for the tests of what the guard decides: `guard_rig()`
starts judges `j1` and `j2` and yields a `Rig` whose `view` a test sets and whose `records` are
the verdict log."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from llmgw.core.errors import NoReadyReplica
from llmgw.core.guard import Direction, JudgeSpec, Policy, VerdictRecord
from llmgw.core.judges import DEFAULT_JUDGE, KNOWN
from llmgw.guard.enforcement import Guard, GuardView, RequestInfo
from llmgw.guard.judge_client import JudgeClient, JudgeTarget
from llmgw.guard.prompts import Turn
from tests.fakes.judge import FakeJudge

SPEC = KNOWN[DEFAULT_JUDGE]
INFO = RequestInfo(model="chat-model", key_name="team-a", key_label="sk-abc…", request_id="req-1")
HELLO = [Turn("user", "hello there")]


@dataclass
class Rig:
    guard: Guard
    judges: dict[str, FakeJudge]
    records: list[VerdictRecord] = field(default_factory=list)
    view: GuardView = field(default_factory=lambda: GuardView(enabled=True))

    async def check(self, p: Policy | list[Policy], turns: list[Turn] = HELLO,
                    direction: Direction = Direction.INPUT) -> bool:
        return await self.guard.check(p if isinstance(p, list) else [p], direction, turns, INFO)


@asynccontextmanager
async def guard_rig(spec: JudgeSpec = SPEC) -> AsyncIterator[Rig]:
    """A started `Rig` whose judges `j1` and `j2` are fake engines answering as `spec`."""
    judges = {name: await FakeJudge().start() for name in ("j1", "j2")}

    def locate(name: str) -> list[JudgeTarget]:
        if name not in judges:
            raise NoReadyReplica(f"judge {name} has no ready replica")
        return [JudgeTarget(spec, judges[name].url)]

    client = JudgeClient(locate)
    await client.start()
    records: list[VerdictRecord] = []
    holder: list[Rig] = []
    guard = Guard(client, lambda: holder[0].view, records.append, lambda: datetime.now(UTC), time.monotonic)
    holder.append(Rig(guard, judges, records))
    try:
        yield holder[0]
    finally:
        await client.close()
        for judge in judges.values():
            await judge.close()
