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
from llmgw.gateway.metrics import LIMITS_DEGRADED
from llmgw.store.redis_pipe import Endpoint, RedisPipe, Reply, Script

logger = logging.getLogger(__name__)

PREFIX = "llmgw:lim:"
_NONE = -1  # no such limit, or no seed

# One call admits a batch of requests, each all or nothing, in order. KEYS: five per member of
# each request: its minute window (a hash: requests 'r', tokens 't'), its leases (a sorted set
# of "lease id:tokens reserved" by expiry), the sum of what those leases reserve, its day's spend
# and its month's. ARGV: lease ms, then per request: its number of members, tokens to reserve,
# lease id, and nine per member: rpm, tpm, concurrent, tokens per day, tokens per month, and the
# floors of the minute window (requests, tokens), the day's spend and the month's (-1: none).
# Returns three values per request: 0, '', 0 when admitted, else the member (1-based) whose limit
# it did not fit, the limit and what that member had used.
# Every Redis call costs about a microsecond here, on every request: the script makes few.
ADMIT = """
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Each member's counts are read once per call and written once at its end, however many
-- requests of the batch count against it: a burst costs Redis a few calls per key, not per request.
local state, order = {}, {}
local function load(kk)
  local mk = KEYS[kk + 1]
  local s = state[mk]
  if s then return s end
  local fz, fs = KEYS[kk + 2], KEYS[kk + 3]
  -- Leases past their expiry are of processes that died holding them: let go.
  local gone = redis.call('ZRANGEBYSCORE', fz, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', fz, '-inf', now)
    local freed = 0
    for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, ':(%d+)$')) end
    redis.call('DECRBY', fs, freed)
  end
  local got = redis.call('HMGET', mk, 'r', 't')
  s = {mk = mk, fz = fz, fs = fs, r = tonumber(got[1] or '0'), t = tonumber(got[2] or '0'),
       new = got[1] == false, changed = false, inflight = redis.call('ZCARD', fz),
       held = nil, reserved = 0, adds = {}, spent = {}}
  state[mk] = s
  order[#order + 1] = s
  return s
end
local out, k, a = {}, 0, 1
while a < #ARGV do
  local n, reserve, lease = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3]
  a = a + 3
  local refused = nil
  for i = 1, n do
    local kk, aa = k + (i - 1) * 5, a + (i - 1) * 9
    local s = load(kk)
    -- What the calling server knows is a floor of the truth: a count Redis lost (restarted
    -- empty) or missed (requests admitted while it did not answer) is raised to it.
    local seed_r, seed_t = tonumber(ARGV[aa + 6]), tonumber(ARGV[aa + 7])
    if seed_r > s.r then s.r = seed_r; s.changed = true end
    if seed_t > s.t then s.t = seed_t; s.changed = true end
    local rpm, tpm, conc = tonumber(ARGV[aa + 1]), tonumber(ARGV[aa + 2]), tonumber(ARGV[aa + 3])
    if rpm >= 0 and s.r + 1 > rpm then refused = {i, 'rpm', s.r}
    elseif tpm >= 0 and s.t + reserve > tpm and s.t > 0 then refused = {i, 'tpm', s.t}
    elseif conc >= 0 and s.inflight + 1 > conc then refused = {i, 'concurrent', s.inflight}
    else
      for b = 0, 1 do
        local limit, seed = tonumber(ARGV[aa + 4 + b]), tonumber(ARGV[aa + 8 + b])
        if limit >= 0 and not refused then
          local bk = KEYS[kk + 4 + b]
          local spent = s.spent[b]
          if spent == nil then spent = tonumber(redis.call('GET', bk) or '-1') end
          if seed > spent then
            spent = seed
            redis.call('SET', bk, spent, 'EX', b == 0 and 172800 or 3456000)
          end
          s.spent[b] = spent
          if s.held == nil then s.held = tonumber(redis.call('GET', s.fs) or '0') end
          local held = s.held + s.reserved + reserve
          if spent >= limit or (spent + held > limit and s.inflight > 0) then
            refused = {i, b == 0 and 'day' or 'month', spent}
          end
        end
      end
    end
    if refused then break end
  end
  if refused then
    out[#out + 1], out[#out + 2], out[#out + 3] = refused[1], refused[2], refused[3]
  else
    for i = 1, n do
      local s = state[KEYS[k + (i - 1) * 5 + 1]]
      s.r, s.t, s.changed = s.r + 1, s.t + reserve, true
      s.inflight, s.reserved = s.inflight + 1, s.reserved + reserve
      s.adds[#s.adds + 1] = now + ttl
      s.adds[#s.adds + 1] = lease .. ':' .. reserve
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = 0, '', 0
  end
  k, a = k + n * 5, a + n * 9
end
for _, s in ipairs(order) do
  if s.changed then
    redis.call('HSET', s.mk, 'r', s.r, 't', s.t)
    if s.new then redis.call('EXPIRE', s.mk, 120) end
  end
  if #s.adds > 0 then
    redis.call('ZADD', s.fz, unpack(s.adds))
    redis.call('PEXPIRE', s.fz, ttl)
  end
  if s.reserved > 0 then redis.call('INCRBY', s.fs, s.reserved) end
end
return out
"""

# One call settles a batch of requests. KEYS as for ADMIT. ARGV: per request, its number of
# members, tokens used, tokens reserved and lease id. A lease that expired meanwhile is gone
# with its reservation: only what is still held is given back. Gathered per member first, so a
# batch costs Redis a few calls per key.
SETTLE = """
local state, order = {}, {}
local k, a = 0, 0
while a < #ARGV do
  local n, tokens = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local reserved, entry = tonumber(ARGV[a + 3]), ARGV[a + 4] .. ':' .. ARGV[a + 3]
  for i = 1, n do
    local kk = k + (i - 1) * 5
    local s = state[KEYS[kk + 1]]
    if not s then
      s = {kk = kk, entries = {}, reserved = {}, delta = 0, tokens = 0}
      state[KEYS[kk + 1]] = s
      order[#order + 1] = s
    end
    s.entries[#s.entries + 1] = entry
    s.reserved[#s.reserved + 1] = reserved
    s.delta, s.tokens = s.delta + tokens - reserved, s.tokens + tokens
  end
  k, a = k + n * 5, a + 4
end
for _, s in ipairs(order) do
  local mk, fz, fs = KEYS[s.kk + 1], KEYS[s.kk + 2], KEYS[s.kk + 3]
  local freed = 0
  if #s.entries == 1 then  -- the common case at low load: ZREM says whether it was there
    if redis.call('ZREM', fz, s.entries[1]) == 1 then freed = s.reserved[1] end
  else
    for i, score in ipairs(redis.call('ZMSCORE', fz, unpack(s.entries))) do
      if score then freed = freed + s.reserved[i] end
    end
    redis.call('ZREM', fz, unpack(s.entries))
  end
  if freed > 0 then redis.call('DECRBY', fs, freed) end
  if s.delta ~= 0 and redis.call('EXISTS', mk) == 1 then redis.call('HINCRBY', mk, 't', s.delta) end
  if s.tokens > 0 then
    for b = 4, 5 do
      if redis.call('EXISTS', KEYS[s.kk + b]) == 1 then redis.call('INCRBY', KEYS[s.kk + b], s.tokens) end
    end
  end
end
return 1
"""

# Keeps the leases of requests still running alive for another lease. KEYS: each member's leases
# (sorted set). ARGV: lease ms, then per request its number of members and its lease's entry.
RENEW = """
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
local k, a = 0, 1
while a < #ARGV do
  local n, entry = tonumber(ARGV[a + 1]), ARGV[a + 2]
  for i = 1, n do
    redis.call('ZADD', KEYS[k + i], 'XX', expiry, entry)
    redis.call('PEXPIRE', KEYS[k + i], ttl)
  end
  k, a = k + n, a + 2
end
return 1
"""

ADMIT_SCRIPT, SETTLE_SCRIPT, RENEW_SCRIPT = Script(ADMIT), Script(SETTLE), Script(RENEW)


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


@dataclass(frozen=True)
class _Asked:
    """An admission waiting for its call's answer: None (admitted) or why it was refused."""

    hold: Hold
    args: list[str | int]
    future: asyncio.Future[Refused | None]


def _keys(member_id: str, minute: int, day: str, month: str) -> list[str]:
    base = PREFIX + member_id
    return [f"{base}:m:{minute}", f"{base}:leases", f"{base}:held", f"{base}:d:{day}",
            f"{base}:mo:{month}"]


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
            keys += _keys(m.id, minute, day, month)
            lim = m.limits
            args += [_limit(lim.rpm), _limit(lim.tpm), _limit(lim.concurrent),
                     _limit(lim.tokens_per_day), _limit(lim.tokens_per_month),
                     m.minute_seed[0], m.minute_seed[1], _limit(m.day_seed), _limit(m.month_seed)]
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
        mk, fz, _, dk, mok = _keys(member_id, minute, *self._dates(minute))

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
                     (ADMIT_SCRIPT, SETTLE_SCRIPT, RENEW_SCRIPT, *scripts), monotonic)
    # A pooled connection to a Redis that restarted fails once: it is retried at once on a new
    # one (within the same deadline), not taken for an outage.
    client = aioredis.Redis.from_url(settings.redis_url, password=password,
                                     socket_timeout=timeout, socket_connect_timeout=timeout,
                                     health_check_interval=30, retry=Retry(NoBackoff(), 1),
                                     retry_on_error=[redis.exceptions.ConnectionError])
    return SharedLimits(pipe, client, settings.lease_s, settings.on_redis_error == "closed")
