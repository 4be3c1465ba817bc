"""The leader's duties: the audit log's retention runs only while this server leads."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmgw.control.duties import LeaderDuties
from llmgw.control.notifier import Notifier
from llmgw.core.clock import FakeClock
from llmgw.core.settings import ControlSettings, TelemetrySettings
from llmgw.server.telemetry import OtelTracer


class _Idle:
    """A keeper, judge keeper or job runner with nothing to do (the duty under test is another)."""

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.since: datetime | None = None

    async def tick(self) -> None:
        pass

    def next_look(self, interval_s: float) -> float:
        return interval_s

    async def run(self, _interval_s: float) -> None:
        await asyncio.Event().wait()

    async def take_over(self) -> list[str]:
        return []

    async def close(self) -> None:
        pass


async def test_the_leader_prunes_audit_entries_older_than_audit_days() -> None:
    clock = FakeClock()
    asked: asyncio.Queue[datetime] = asyncio.Queue()

    async def prune(before: datetime) -> int:
        asked.put_nowait(before)
        return 3

    idle: Any = _Idle()
    duties = LeaderDuties(idle, idle, idle, Notifier(), ControlSettings(audit_days=30), clock,
                          prune_audit=prune)
    await duties.start(epoch=1)
    try:
        before = await asyncio.wait_for(asked.get(), 5)  # at once on election
        assert before == clock.now() - timedelta(days=30)
    finally:
        await duties.stop()
    assert not duties.running  # deposed: the pruning stopped with the other duties


async def test_each_replica_keeper_pass_is_a_trace_of_its_own() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(TelemetrySettings(otlp_endpoint="http://collector.invalid:4318"), exporter)
    idle: Any = _Idle()
    passed = asyncio.Event()

    async def tick() -> None:
        passed.set()

    idle.tick = tick
    duties = LeaderDuties(idle, idle, idle, Notifier(), ControlSettings(), FakeClock(), tracer=tracer)
    await duties.start(epoch=1)
    try:
        await asyncio.wait_for(passed.wait(), 5)
    finally:
        await duties.stop()
    tracer.close()
    [span] = exporter.get_finished_spans()
    assert span.name == "replica keeper pass" and span.parent is None


async def test_the_replica_keeper_looks_again_when_its_last_plan_asks() -> None:
    # A long interval, nothing wakes the keeper: only its own next_look brings the passes.
    idle: Any = _Idle()
    passes: list[int] = []
    third = asyncio.Event()

    async def tick() -> None:
        passes.append(0)
        if len(passes) == 3:
            third.set()

    idle.tick = tick
    idle.next_look = lambda interval_s: 0.0 if len(passes) < 3 else interval_s
    duties = LeaderDuties(idle, idle, idle, Notifier(), ControlSettings(keeper_interval_s=300),
                          FakeClock())
    await duties.start(epoch=1)
    try:
        await asyncio.wait_for(third.wait(), 5)
    finally:
        await duties.stop()
    assert len(passes) == 3


def test_audit_days_defaults_to_90() -> None:
    assert ControlSettings().audit_days == 90
