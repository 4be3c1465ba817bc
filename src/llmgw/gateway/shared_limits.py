"""Limits counted in Redis: one atomic step per request for every server and worker of an
install, so rpm, tpm, concurrency and day and month budgets hold exactly across all of them.

Admission is one script call (one round trip): for the key and each key above it (minters,
team) it checks the minute window, the requests in flight and the budgets, and only when all
fit counts the request against all of them. Each request holds a lease (a concurrency slot and
its token reservation) that expires on its own when its process dies before settling it, so a
crashed worker's holds never leak. Settling is a second call, off the request's way.

Redis holds live counters only: the store's usage rows stay the record. Every admission
also brings what the calling server knows (its own counts now, the other servers' at its last
sync, the usage table's spend plus what it settled since): a floor of the truth, to which a
count Redis lost (restarted empty) or missed (while it did not answer) is raised. So a Redis
restart costs at most the other servers' counts of the last sync interval. Every call has a deadline
(`redis_timeout_ms`): a stalled Redis never stalls requests longer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from llmgw.core.errors import ConfigError
from llmgw.core.settings import LimitsSettings
from llmgw.core.types import Limits

logger = logging.getLogger(__name__)

PREFIX = "llmgw:lim:"
# After a failed call Redis is left alone this long: requests admit locally (or are refused)
# at once instead of each waiting out the deadline.
RETRY_AFTER_FAILURE_S = 1.0
_NONE = -1  # no such limit, or no seed

# KEYS: five per member (minute window hash, lease expiries zset, lease reservations hash, day
# spend, month spend). ARGV: reserve, lease id, lease ms, then nine per member: rpm, tpm,
# concurrent, tokens per day, tokens per month, and the floors of the minute window (requests,
# tokens), the day's spend and the month's. Returns {0} when admitted, else {member (1-based), limit, used}.
ADMIT = """
local reserve, lease, ttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS / 5
for i = 1, n do
  local k, a = (i - 1) * 5, 3 + (i - 1) * 9
  local mk, fz, fr, dk, mok = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]
  local rpm, tpm, conc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local tpd, tpmo = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local gone = redis.call('ZRANGEBYSCORE', fz, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', fz, '-inf', now)
    redis.call('HDEL', fr, unpack(gone))
  end
  -- What the calling server knows is a floor of the truth: a count Redis lost (restarted
  -- empty) or missed (requests admitted while it did not answer) is raised to it.
  local r = tonumber(redis.call('HGET', mk, 'r') or '0')
  local used = tonumber(redis.call('HGET', mk, 't') or '0')
  local seed_r, seed_t = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  if seed_r > r then r = seed_r; redis.call('HSET', mk, 'r', r) end
  if seed_t > used then used = seed_t; redis.call('HSET', mk, 't', used) end
  if rpm >= 0 and r + 1 > rpm then return {i, 'rpm', r} end
  if tpm >= 0 and used + reserve > tpm and used > 0 then return {i, 'tpm', used} end
  local inflight = redis.call('ZCARD', fz)
  if conc >= 0 and inflight + 1 > conc then return {i, 'concurrent', inflight} end
  if tpd >= 0 or tpmo >= 0 then
    local held = reserve
    for _, v in ipairs(redis.call('HVALS', fr)) do held = held + tonumber(v) end
    local budgets = {{tpd, dk, ARGV[a + 8], 172800, 'day'}, {tpmo, mok, ARGV[a + 9], 3456000, 'month'}}
    for _, b in ipairs(budgets) do
      if b[1] >= 0 then
        local spent = tonumber(redis.call('GET', b[2]) or '-1')
        if tonumber(b[3]) > spent then
          spent = tonumber(b[3])
          redis.call('SET', b[2], spent, 'EX', b[4])
        end
        if spent >= b[1] or (spent + held > b[1] and inflight > 0) then return {i, b[5], spent} end
      end
    end
  end
end
for i = 1, n do
  local k = (i - 1) * 5
  redis.call('HINCRBY', KEYS[k + 1], 'r', 1)
  redis.call('HINCRBY', KEYS[k + 1], 't', reserve)
  redis.call('EXPIRE', KEYS[k + 1], 120)
  redis.call('ZADD', KEYS[k + 2], now + ttl, lease)
  redis.call('HSET', KEYS[k + 3], lease, reserve)
  redis.call('PEXPIRE', KEYS[k + 2], ttl)
  redis.call('PEXPIRE', KEYS[k + 3], ttl)
end
return {0}
"""

# KEYS as for ADMIT. ARGV: tokens used, tokens reserved, lease id.
SETTLE = """
local tokens, reserved, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
for i = 1, #KEYS / 5 do
  local k = (i - 1) * 5
  redis.call('ZREM', KEYS[k + 2], lease)
  redis.call('HDEL', KEYS[k + 3], lease)
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then
    redis.call('HINCRBY', KEYS[k + 1], 't', tokens - reserved)
  end
  for _, key in ipairs({KEYS[k + 4], KEYS[k + 5]}) do
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, tokens) end
  end
end
return 1
"""


class SharedDown(Exception):
    """Redis did not answer within its deadline, or refused: limits fall back or refuse."""


@dataclass(frozen=True)
class Member:
    """One key a request counts against, with its limits and what to seed lost counters with."""

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


def _keys(member_id: str, minute: int, day: str, month: str) -> list[str]:
    base = PREFIX + member_id
    return [f"{base}:m:{minute}", f"{base}:lease", f"{base}:held", f"{base}:d:{day}",
            f"{base}:mo:{month}"]


def _limit(value: int | None) -> int:
    return _NONE if value is None else value


class SharedLimits:
    """Admission and settlement in the install's Redis."""

    def __init__(self, client: aioredis.Redis, timeout_s: float, lease_s: float, closed: bool,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client  # the install's Redis, for what else it shares (cooldowns)
        self._client = client
        self._admit = client.register_script(ADMIT)
        self._settle = client.register_script(SETTLE)
        self._timeout_s = timeout_s
        self._lease_ms = int(lease_s * 1000)
        self.closed = closed
        self._monotonic = monotonic
        self._retry_at = 0.0
        # When the first failure of the current outage was, for /health and the metric.
        self.degraded_since: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._settling: list[tuple[Hold, int]] = []

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @property
    def degraded(self) -> bool:
        return self.degraded_since is not None

    def usable(self) -> bool:
        """Whether to try Redis now (not within a second of a failure)."""
        return self._monotonic() >= self._retry_at

    async def admit(self, members: Sequence[Member], minute: int, day: str, month: str,
                    reserve: int) -> Hold | Refused:
        """Check and count one request against every member, all or nothing."""
        keys: list[str] = []
        args: list[Any] = [reserve, lease := uuid.uuid4().hex, self._lease_ms]
        for m in members:
            keys += _keys(m.id, minute, day, month)
            lim = m.limits
            args += [_limit(lim.rpm), _limit(lim.tpm), _limit(lim.concurrent),
                     _limit(lim.tokens_per_day), _limit(lim.tokens_per_month),
                     m.minute_seed[0], m.minute_seed[1], _limit(m.day_seed), _limit(m.month_seed)]
        answer = await self._call(lambda: self._admit(keys=keys, args=args))
        if int(answer[0]) == 0:
            return Hold(lease, tuple(keys), reserve)
        limit = answer[1].decode() if isinstance(answer[1], bytes) else str(answer[1])
        return Refused(int(answer[0]) - 1, limit, int(answer[2]))

    async def live(self, member_id: str, minute: int, day: str,
                   month: str) -> tuple[int, int, int, int, int]:
        """A member's counts in Redis: requests and tokens this minute, requests in flight
        (unexpired leases), tokens today and this month."""
        mk, fz, _, dk, mok = _keys(member_id, minute, day, month)

        async def read() -> Any:
            seconds, micros = await self._client.time()
            pipe = self._client.pipeline(transaction=False)
            pipe.hmget(mk, "r", "t")
            pipe.zcount(fz, seconds * 1000 + micros // 1000, "+inf")
            pipe.get(dk)
            pipe.get(mok)
            return await pipe.execute()

        (r, t), in_flight, d, mo = await self._call(read)
        return int(r or 0), int(t or 0), int(in_flight), int(d or 0), int(mo or 0)

    def settle(self, hold: Hold, tokens: int) -> None:
        """Release the hold and count what was used, in the background: the settlements of one
        loop turn go to Redis in one pipeline (one round trip, however many requests ended),
        sent at the end of the turn without waiting for the previous turn's."""
        self._settling.append((hold, tokens))
        if len(self._settling) == 1:
            asyncio.get_running_loop().call_soon(self._send_settlements)

    def _send_settlements(self) -> None:
        batch, self._settling = self._settling, []
        task = asyncio.get_running_loop().create_task(self._settle_batch(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle_batch(self, batch: list[tuple[Hold, int]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for hold, tokens in batch:
            await self._settle(keys=list(hold.keys), args=[tokens, hold.reserved, hold.lease],
                               client=pipe)
        try:
            await self._call(pipe.execute)
        except SharedDown:
            pass  # the leases expire on their own; the spend is in the usage rows

    async def _call(self, run: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with asyncio.timeout(self._timeout_s):
                answer = await run()
        except (TimeoutError, redis.exceptions.RedisError, OSError) as exc:
            self._retry_at = self._monotonic() + RETRY_AFTER_FAILURE_S
            if self.degraded_since is None:
                self.degraded_since = time.time()
                how = "refusing requests" if self.closed else "admitting from this server's own counts"
                logger.warning("the shared limit store did not answer (%s); %s until it does",
                               type(exc).__name__, how)
            raise SharedDown from exc
        if self.degraded_since is not None:
            self.degraded_since = None
            logger.info("the shared limit store answers again; limits are exact across servers")
        return answer

    async def close(self) -> None:
        """Wait for the settlements under way (briefly), then close the connections."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=2 * self._timeout_s + 1)
        await self._client.aclose()


class DegradedMetric(Collector):
    """`llmgw_limits_degraded`: 1 while this process cannot reach the shared limit store."""

    def __init__(self, shared: SharedLimits) -> None:
        self._shared = shared

    def collect(self) -> list[Metric]:
        gauge = GaugeMetricFamily("llmgw_limits_degraded", "1 while the shared limit store "
                                  "(Redis) does not answer and limits fall back or refuse")
        gauge.add_metric([], 1.0 if self._shared.degraded else 0.0)
        return [gauge]


def connect(settings: LimitsSettings,
            monotonic: Callable[[], float] = time.monotonic) -> SharedLimits | None:
    """The shared limits `[limits]` configures, or None without a `redis_url`; `monotonic`
    times the pause after a failure."""
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
    # A pooled connection to a Redis that restarted fails once: it is retried at once on a new
    # one (within the same deadline), not taken for an outage.
    client = aioredis.Redis.from_url(settings.redis_url, password=password,
                                     socket_timeout=timeout, socket_connect_timeout=timeout,
                                     health_check_interval=30, retry=Retry(NoBackoff(), 1),
                                     retry_on_error=[redis.exceptions.ConnectionError])
    return SharedLimits(client, timeout, settings.lease_s, settings.on_redis_error == "closed",
                        monotonic)
