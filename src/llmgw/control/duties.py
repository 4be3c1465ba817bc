"""The leader's duties, owned in one place: the replica keeper (which also answers demand:
cold starts, scaling on load, idle stops, swaps), the judge keeper and the serve jobs.

`start` runs when this server is elected, `stop` when it is deposed or stops; nothing here runs
on a follower. Each duty is a loop woken by the change notifier or, failing that, every
`keeper_interval_s`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from llmgw.control.judge_loop import JudgeKeeper
from llmgw.control.notifier import Notifier
from llmgw.control.replica_keeper import ReplicaKeeper
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core.clock import Clock
from llmgw.core.loops import every
from llmgw.core.settings import ControlSettings

logger = logging.getLogger(__name__)


class LeaderDuties:
    """Starts and stops the leader-only loops; knows when the replica keeper last finished."""

    def __init__(self, keeper: ReplicaKeeper, judges: JudgeKeeper, jobs: ServeJobs,
                 notifier: Notifier, settings: ControlSettings, clock: Clock) -> None:
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
            (every(interval, self.keeper.wake, self._reconcile, "replica keeper", logger),
             "replica-keeper"),
            (self.judges.run(interval), "judge-keeper"),
            # A job submitted to any server is a stored row: the leader takes it from there.
            (every(interval, self._jobs_wake, self.jobs.take_over, "serve jobs", logger),
             "serve-jobs"),
        )
        self._tasks = [asyncio.create_task(coro, name=name) for coro, name in loops]
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
        await self.keeper.tick()
        self.last_pass = self._clock.now()
