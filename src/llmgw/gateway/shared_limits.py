"""Limits counted in Redis: one atomic step per request for every server and worker of an
install, so rpm, tpm, concurrency and day and month budgets hold exactly across all of them.

Admission is one script call (one round trip): for the key and each key above it (minters,
team) it checks the minute window, the requests in flight and the budgets, and only when all
fit counts the request against all of them. Each request holds a lease (a concurrency slot and
its token reservation), renewed while its process lives, that runs out within `lease_s` when
the process dies before settling it: a crashed worker's holds never leak. Settling is a second
call, off the request's way.

Redis holds live counters only: the store's usage rows stay the record. Every admission
also brings what the calling server knows (its own counts now, the other servers' at its last
sync, the usage table's spend plus what it settled since): a floor of the truth, to which a
count Redis lost (restarted empty) or missed (while it did not answer) is raised. So a Redis
restart costs at most the other servers' counts of the last sync interval. Every call has a deadline
(`redis_timeout_ms`): a stalled Redis never stalls requests longer.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hiredis
import redis.asyncio as aioredis
import redis.exceptions
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from llmgw.core.errors import ConfigError, SharedStoreDown
from llmgw.core.settings import LimitsSettings
from llmgw.core.types import Limits
from llmgw.gateway.limit_kinds import KINDS
from llmgw.gateway.limit_scripts import ADMIT_SCRIPT, RENEW_SCRIPT, SCRIPTS, SETTLE_SCRIPT, member_keys
from llmgw.gateway.metrics import LIMITS_DEGRADED
from llmgw.store.redis_pipe import Endpoint, RedisPipe, Reply, Script

logger = logging.getLogger(__name__)

_NONE = -1  # no such limit, or no seed


@dataclass(frozen=True)
class Member:
    """One key a request counts against, with its limits and what to seed lost counters with
    (or a `limits.Counter`, its limits in the request kinds' slots)."""

    id: str
    limits: Limits
    minute_seed: tuple[int, int]
    day_seed: int | None
    month_seed: int | None


@dataclass(frozen=True)
class Hold:
    """An admitted request's lease in Redis."""

    lease: str
    keys: tuple[str, ...]
    reserved: int


@dataclass(frozen=True)
class Refused:
    """Which member's limit a request did not fit, and what that member had used."""

    index: int
    limit: str
    used: int


@dataclass(frozen=True)
class _Asked:
    """An admission waiting for its call's answer: None (admitted) or why it was refused."""

    hold: Hold
    args: list[str | int]
    future: asyncio.Future[Refused | None]


def _limit(value: int | None) -> int:
    return _NONE if value is None else value


class SharedLimits:
    """Admission and settlement in the install's Redis."""

    def __init__(self, pipe: RedisPipe, client: aioredis.Redis, lease_s: float,
                 closed: bool) -> None:
        self.pipe = pipe  # the process's connection, for what else every request does there
        self.client = client  # the redis client, for what else the install shares (cooldowns)
        self._lease_s = lease_s
        self._lease_ms = int(lease_s * 1000)
        # The holds of requests still running, renewed every third of a lease: a live request
        # keeps its hold however long it runs, a dead process's holds run out within a lease.
        self._holding: dict[str, Hold] = {}
        self._renewer: asyncio.Task[None] | None = None
        self.closed = closed
        # When the first failure of the current outage was, for /health and the metric.
        self.degraded_since: float | None = None
        self._dated: tuple[int, str, str] = (-1, "", "")  # the last minute's day and month
        self._asking: list[_Asked] = []  # admissions for the next call
        self._admitting = False  # an admission call is under way
        self._settling: list[tuple[Hold, int]] = []  # settlements for the end of the loop turn
        # Lease ids: unique to this process (a random prefix), then counted.
        self._lease_prefix = uuid.uuid4().hex[:12] + ":"
        self._leases = itertools.count()

    @property
    def timeout_s(self) -> float:
        return self.pipe.timeout_s

    @property
    def degraded(self) -> bool:
        return self.degraded_since is not None

    def usable(self) -> bool:
        """Whether to try Redis now (not within a second of a failure)."""
        return self.pipe.usable()

    def _dates(self, minute: int) -> tuple[str, str]:
        """The UTC day and month of `minute` (since the epoch), as the budget keys name them."""
        if self._dated[0] != minute:
            when = datetime.fromtimestamp(minute * 60, UTC)
            self._dated = (minute, when.strftime("%Y-%m-%d"), when.strftime("%Y-%m"))
        return self._dated[1], self._dated[2]

    async def admit(self, members: Sequence[Member], minute: int, reserve: int) -> Hold | Refused:
        """Check and count one request against every member, all or nothing; `SharedStoreDown`
        when Redis does not answer.

        Requests that come while an admission call is under way go together in the next one,
        sent when it returns: one call (and one script run) for a burst, not one each."""
        keys: list[str] = []
        day, month = self._dates(minute)
        lease = f"{self._lease_prefix}{next(self._leases)}"
        args: list[str | int] = [len(members), reserve, lease]
        for m in members:
            keys += member_keys(m.id, minute, day, month)
            lim = m.limits
            args += [_limit(getattr(lim, kind.field)) for kind in KINDS]
            args += [m.minute_seed[0], m.minute_seed[1], _limit(m.day_seed), _limit(m.month_seed)]
        asked = _Asked(Hold(lease, tuple(keys), reserve), args,
                       asyncio.get_running_loop().create_future())
        self._asking.append(asked)
        if not self._admitting:
            self._send_admissions()
        # Cancelled here (the client left), the future is cancelled too: an admission Redis
        # made meanwhile is settled at once (`_admitted`), not left to hold its lease.
        outcome = await asked.future
        if outcome is None:
            return asked.hold
        return outcome

    def _send_admissions(self) -> None:
        if self._settling:  # requests that ended go first: a slot they free is free for these
            self._send_settlements()
        batch, self._asking = self._asking, []
        keys: list[str] = []
        args: list[str | int] = [self._lease_ms]
        for asked in batch:
            keys += asked.hold.keys
            args += asked.args
        self._admitting = True
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew(), name="lease renewal")
        self.pipe.request(functools.partial(self._admitted, batch),
                           "EVALSHA", ADMIT_SCRIPT.sha, len(keys), *keys, *args)

    def _admitted(self, batch: list[_Asked], answer: Reply) -> None:
        self._admitting = False
        if isinstance(answer, hiredis.ReplyError):
            answer = SharedStoreDown(f"the shared store refused the admission script: {answer}")
        if isinstance(answer, SharedStoreDown):
            error = answer
            self._failed(error)
            # Those that came meanwhile would meet the same Redis: they fall back at once.
            batch, self._asking = batch + self._asking, []
            for asked in batch:
                if not asked.future.done():
                    asked.future.set_exception(error)
            return
        self._answered()
        for i, asked in enumerate(batch):
            member, limit, used = answer[3 * i], answer[3 * i + 1], answer[3 * i + 2]
            refused = None if int(member) == 0 else Refused(
                int(member) - 1, limit.decode() if isinstance(limit, bytes) else str(limit),
                int(used))
            if not asked.future.done():
                if refused is None:
                    self._holding[asked.hold.lease] = asked.hold
                asked.future.set_result(refused)
            elif refused is None:
                self.settle(asked.hold, 0)
        if self._asking:
            self._send_admissions()

    async def live(self, member_id: str, minute: int) -> tuple[int, int, int, int, int]:
        """A member's counts in Redis: requests and tokens this minute, requests in flight
        (unexpired leases), tokens today and this month."""
        mk, fz, _, dk, mok = member_keys(member_id, minute, *self._dates(minute))

        async def read() -> list[Any]:
            seconds, micros = await self.pipe.call("TIME")
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            return list(await asyncio.gather(
                self.pipe.call("HMGET", mk, "r", "t"), self.pipe.call("ZCOUNT", fz, now_ms, "+inf"),
                self.pipe.call("GET", dk), self.pipe.call("GET", mok)))

        try:
            (r, t), in_flight, d, mo = await read()
        except SharedStoreDown as exc:
            self._failed(exc)
            raise
        self._answered()
        return int(r or 0), int(t or 0), int(in_flight), int(d or 0), int(mo or 0)

    def settle(self, hold: Hold, tokens: int) -> None:
        """Release the hold and count what was used, without waiting for Redis' word: the
        request is over. The settlements of one loop turn go in one call. Not sent while Redis
        is unreachable: the lease then expires on its own and the spend is in the usage rows."""
        self._holding.pop(hold.lease, None)
        self._settling.append((hold, tokens))
        if len(self._settling) == 1:
            asyncio.get_running_loop().call_soon(self._send_settlements)

    def _send_settlements(self) -> None:
        batch, self._settling = self._settling, []
        if not batch:  # sent already, ahead of admissions
            return
        keys: list[str] = []
        args: list[str | int] = []
        for hold, tokens in batch:
            keys += hold.keys
            args += [len(hold.keys) // 5, tokens, hold.reserved, hold.lease]
        self.pipe.send("EVALSHA", SETTLE_SCRIPT.sha, len(keys), *keys, *args)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            if not self._holding:
                continue
            keys: list[str] = []
            args: list[str | int] = [self._lease_ms]
            for hold in self._holding.values():
                leases = hold.keys[1::5]
                keys += leases
                args += [len(leases), f"{hold.lease}:{hold.reserved}"]
            # Not sent while Redis is unreachable: the holds then run out on their own.
            self.pipe.send("EVALSHA", RENEW_SCRIPT.sha, len(keys), *keys, *args)

    def _failed(self, error: SharedStoreDown) -> None:
        self.pipe.pause()
        if self.degraded_since is None:
            self.degraded_since = time.time()
            how = "refusing requests" if self.closed else "admitting from this server's own counts"
            logger.warning("%s; %s until it does", error, how)

    def _answered(self) -> None:
        if self.degraded_since is not None:
            self.degraded_since = None
            logger.info("the shared limit store answers again; limits are exact across servers")

    async def close(self) -> None:
        """Close the connections (settlements already written have reached Redis' socket)."""
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
        self.pipe.close()
        await self.client.aclose()


class DegradedMetric(Collector):
    """`llmgw_limits_degraded`: 1 while this process cannot reach the shared limit store."""

    def __init__(self, shared: SharedLimits) -> None:
        self._shared = shared

    def collect(self) -> list[Metric]:
        gauge = LIMITS_DEGRADED.gauge()
        gauge.add_metric([], 1.0 if self._shared.degraded else 0.0)
        return [gauge]


def connect(settings: LimitsSettings, monotonic: Callable[[], float] = time.monotonic,
            scripts: tuple[Script, ...] = ()) -> SharedLimits | None:
    """The shared limits `[limits]` configures, or None without a `redis_url`; `monotonic`
    times the pause after a failure; `scripts`: what else the process's connection runs."""
    if not settings.redis_url:
        return None
    password = None
    if settings.redis_password_file:
        try:
            password = Path(settings.redis_password_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read redis_password_file "
                              f"{settings.redis_password_file}: {exc.strerror}") from exc
    elif settings.redis_password_env:
        password = os.environ.get(settings.redis_password_env)
        if not password:
            raise ConfigError(f"redis_password_env names {settings.redis_password_env}, "
                              "which is not set")
    timeout = settings.redis_timeout_ms / 1000
    pipe = RedisPipe(Endpoint.from_url(settings.redis_url, password), timeout,
                     (*SCRIPTS, *scripts), monotonic)
    # A pooled connection to a Redis that restarted fails once: it is retried at once on a new
    # one (within the same deadline), not taken for an outage.
    client = aioredis.Redis.from_url(settings.redis_url, password=password,
                                     socket_timeout=timeout, socket_connect_timeout=timeout,
                                     health_check_interval=30, retry=Retry(NoBackoff(), 1),
                                     retry_on_error=[redis.exceptions.ConnectionError])
    return SharedLimits(pipe, client, settings.lease_s, settings.on_redis_error == "closed")
