"""The node agent with a fake engine: an engine script, the agent over a fixed assignment, and
what it reported."""

from __future__ import annotations

import asyncio
import stat
import sys
from pathlib import Path

import pytest

from llmgw.core.clock import SystemClock
from llmgw.node.agent import AgentConfig, Assignment, NodeAgent
from llmgw.node.engine_compat import EngineCompat
from llmgw.node.supervisor import Status
from tests.fakes.processes import FAKE_ENGINE


def engine_script(tmp_path: Path, *fake_args: str) -> str:
    """An executable named like an engine that runs the fake engine with `fake_args` (plus the
    llama-server argv the agent gives it)."""
    path = tmp_path / "llama-server"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_ENGINE} {' '.join(fake_args)} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


class Reports:
    """What the agent reported per replica, awaitable."""

    def __init__(self) -> None:
        self.seen: list[Status] = []
        self.changed = asyncio.Condition()

    async def __call__(self, replica_id: str, status: Status) -> None:
        async with self.changed:
            self.seen.append(status)
            self.changed.notify_all()

    async def until(self, want: object, what: str) -> Status:
        async with asyncio.timeout(30), self.changed:
            await self.changed.wait_for(lambda: any(want(s) for s in self.seen))  # type: ignore[operator]
        return next(s for s in self.seen if want(s))  # type: ignore[operator]


@pytest.fixture
def reports() -> Reports:
    return Reports()


def agent_for(tmp_path: Path, binary: str, reports: Reports, assigned: list[Assignment],
              **cfg: object) -> NodeAgent:
    async def assignments() -> list[Assignment]:
        return list(assigned)

    async def forget(rid: str) -> None:
        return None

    config = AgentConfig(node_id="big", host="127.0.0.1", log_dir=tmp_path / "logs",
                         llama_server=lambda: binary, backoff_base_s=0.05,
                         compat=EngineCompat(tmp_path / "engine-compat.json", cpu="test-cpu"),
                         **cfg)  # type: ignore[arg-type]
    return NodeAgent(config, assignments, reports, forget, SystemClock())
