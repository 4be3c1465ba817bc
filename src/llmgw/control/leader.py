"""Leader election on a lease row with an epoch (the fencing token).

`plan` is pure. Timing follows Kubernetes' rule, ttl > renew deadline > 1.2 × retry: a leader
that has not renewed for `renew_deadline` stops acting as leader while its lease still has
`ttl - renew_deadline` to run, so no two servers act as leader at once, and every leader-only
write checks its epoch in the same transaction for the case where a server was paused past that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from llmgw.core.clock import Clock
from llmgw.core.errors import LlmgwError
from llmgw.store.lease_repo import Lease, LeaseRepo

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    ttl: timedelta = timedelta(seconds=15)
    renew_deadline: timedelta = timedelta(seconds=10)
    retry: timedelta = timedelta(seconds=2)

    def __post_init__(self) -> None:
        if not self.ttl > self.renew_deadline > self.retry * 1.2:
            raise ValueError(
                f"leader timing must satisfy ttl > renew deadline > 1.2 × retry; got ttl "
                f"{self.ttl.total_seconds()}s, deadline {self.renew_deadline.total_seconds()}s, "
                f"retry {self.retry.total_seconds()}s"
            )


@dataclass(frozen=True)
class Leading:
    """This server leads at `epoch`; `renewed_at` is its last successful renewal."""

    epoch: int
    renewed_at: datetime


class Act(StrEnum):
    ACQUIRE = "acquire"
    RENEW = "renew"
    STEP_DOWN = "step_down"
    WAIT = "wait"


def plan(me: str, lease: Lease | None, leading: Leading | None, now: datetime, timing: Timing) -> Act:
    """What this server does on one look at the lease."""
    if leading is not None:
        if now - leading.renewed_at >= timing.renew_deadline:
            return Act.STEP_DOWN
        return Act.RENEW
    if lease is None or lease.expires_at <= now or lease.holder == me:
        return Act.ACQUIRE
    return Act.WAIT


class Elector:
    """Runs the election for one server and starts/stops its leader loops."""

    def __init__(
        self,
        me: str,
        leases: LeaseRepo,
        clock: Clock,
        timing: Timing,
        on_elected: Callable[[int], Awaitable[None]],
        on_deposed: Callable[[], Awaitable[None]],
    ) -> None:
        self.me = me
        self._leases = leases
        self._clock = clock
        self.timing = timing
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.leading: Leading | None = None

    @property
    def epoch(self) -> int | None:
        return self.leading.epoch if self.leading else None

    async def step(self) -> Act:
        """One look at the lease, and what came of it."""
        now = self._clock.now()
        lease = None if self.leading else await asyncio.to_thread(self._leases.get)
        act = plan(self.me, lease, self.leading, now, self.timing)
        if act == Act.ACQUIRE:
            got = await asyncio.to_thread(self._leases.acquire, self.me, now, self.timing.ttl)
            if got is not None and got.holder == self.me:
                self.leading = Leading(got.epoch, now)
                logger.info("elected leader at epoch %d (lease until %s)", got.epoch, got.expires_at)
                await self._on_elected(got.epoch)
        elif act == Act.RENEW:
            assert self.leading is not None
            # A renew that hangs (the database host gone quiet) must not outlast the deadline:
            # past it this server steps down, whatever the call would have said.
            left = self.leading.renewed_at + self.timing.renew_deadline - now
            try:
                kept = await asyncio.wait_for(asyncio.to_thread(
                    self._leases.renew, self.me, self.leading.epoch, now, self.timing.ttl
                ), timeout=max(left.total_seconds(), 0.05))
            except Exception:
                # The store is out of reach: keep leading until the renew deadline, no longer.
                logger.warning("could not renew the leader lease; stepping down by %s",
                               self.leading.renewed_at + self.timing.renew_deadline)
                return act
            if kept:
                self.leading = Leading(self.leading.epoch, now)
            else:
                await self._depose(f"the lease was taken over (epoch {self.leading.epoch} is stale)")
        elif act == Act.STEP_DOWN:
            await self._depose("could not renew the lease within the renew deadline")
        return act

    async def _depose(self, why: str) -> None:
        logger.warning("stepping down as leader: %s", why)
        self.leading = None
        await self._on_deposed()

    async def run(self) -> None:
        """Look every `retry`; on cancel, step down and release the lease for a fast handover."""
        try:
            while True:
                try:
                    await self.step()
                except LlmgwError as exc:
                    logger.warning("leader election step failed: %s", exc.message)
                except Exception:
                    logger.exception("leader election step failed")
                await asyncio.sleep(self.timing.retry.total_seconds())
        finally:
            if self.leading is not None:
                epoch = self.leading.epoch
                self.leading = None
                await asyncio.shield(self._on_deposed())
                try:
                    await asyncio.shield(asyncio.to_thread(
                        self._leases.release, self.me, epoch, self._clock.now()))
                except Exception:
                    logger.exception("could not release the leader lease; it expires by itself")
