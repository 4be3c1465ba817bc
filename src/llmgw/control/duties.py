"""The leader's duties, owned in one place: the replica keeper (which also answers demand:
cold starts, scaling on load, idle stops, swaps), the judge keeper, the serve jobs and the audit
log's retention.

`start` runs when this server is elected, `stop` when it is deposed or stops; nothing here runs
on a follower. Each duty is a loop woken by the change notifier or, failing that, every
`keeper_interval_s` (the replica keeper sooner when its last plan asks: see `plan`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from llmgw.control.judge_loop import JudgeKeeper
from llmgw.control.notifier import Notifier
from llmgw.control.replica_keeper import ReplicaKeeper
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core import tracing
from llmgw.core.clock import Clock
from llmgw.core.loops import every
from llmgw.core.settings import ControlSettings
from llmgw.core.tracing import NOOP_TRACER, Tracer

logger = logging.getLogger(__name__)

# How often the leader drops audit entries older than `audit_days`: retention is in days, so an
# hour late is on time.
AUDIT_PRUNE_S = 3600.0


class LeaderDuties:
    """Starts and stops the leader-only loops; knows when the replica keeper last finished."""

    def __init__(self, keeper: ReplicaKeeper, judges: JudgeKeeper, jobs: ServeJobs,
                 notifier: Notifier, settings: ControlSettings, clock: Clock, *,
                 prune_audit: Callable[[datetime], Awaitable[int]] | None = None,
                 tracer: Tracer = NOOP_TRACER) -> None:
        """`prune_audit(before)`: drops audit entries older than `before`, says how many."""
        self._prune_audit = prune_audit
        self._tracer = tracer
        self._audit_wake = asyncio.Event()  # nothing wakes it: it runs hourly
        self.keeper = keeper
        self.judges = judges
        self.jobs = jobs
        self._notifier = notifier
        self._settings = settings
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self._jobs_wake = asyncio.Event()
        # When the replica keeper last finished a pass while this server leads (`cluster
        # status` shows it; the failover benchmark measures to a new leader's first one).
        self.last_pass: datetime | None = None

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    async def start(self, epoch: int) -> None:
        """Take up the duties at `epoch`: every loop looks at once."""
        await self.stop()
        self.last_pass = None
        # Heartbeats older than the election count as made at it (see the keeper's plan).
        self.keeper.since = self._clock.now()
        interval = self._settings.keeper_interval_s
        for wake in (self.keeper.wake, self.judges.wake, self._jobs_wake):
            self._notifier.watch(wake)
        loops = (
            (every(lambda: self.keeper.next_look(interval), self.keeper.wake, self._reconcile,
                   "replica keeper", logger), "replica-keeper"),
            (self.judges.run(interval), "judge-keeper"),
            # A job submitted to any server is a stored row: the leader takes it from there.
            (every(interval, self._jobs_wake, self.jobs.take_over, "serve jobs", logger),
             "serve-jobs"),
        )
        self._tasks = [asyncio.create_task(coro, name=name) for coro, name in loops]
        if self._prune_audit is not None:
            self._tasks.append(asyncio.create_task(
                every(AUDIT_PRUNE_S, self._audit_wake, self._prune, "audit retention", logger),
                name="audit-retention"))
        logger.info("leader duties started at epoch %d", epoch)

    async def stop(self) -> None:
        """Give up the duties: loops stop, jobs stop unmarked (the next leader resumes them)."""
        for wake in (self.keeper.wake, self.judges.wake, self._jobs_wake):
            self._notifier.unwatch(wake)
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self.jobs.close()

    async def _reconcile(self) -> None:
        with tracing.active(self._tracer.root("replica keeper pass")):
            await self.keeper.tick()
        self.last_pass = self._clock.now()

    async def _prune(self) -> None:
        assert self._prune_audit is not None
        before = self._clock.now() - timedelta(days=self._settings.audit_days)
        if dropped := await self._prune_audit(before):
            logger.info("audit log: dropped %d entries older than %d days", dropped,
                        self._settings.audit_days)
