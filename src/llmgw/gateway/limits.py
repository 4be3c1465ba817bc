"""Per-key limits on the request path: requests and tokens per minute, requests in flight, and
token budgets per day and month. MCP tool calls are admitted by the same engines on counters of
their own (`admit_calls`, `Counter`: calls per minute and in flight), so they hold as the
request kinds do, on one server and across servers.

A key minted by a user key shares its minter's limits: admission checks and counts a request
against the key and every minter above it (`KeyCache.chain`), so a family of keys has one rpm,
tpm, concurrency limit and budget, those of the key an admin made, whatever its keys mint
(each key's own limits hold as well, and can only be tighter).

Admission reads memory only. A server's minute windows are counted for all its workers in one
place (`gateway.windows`), so on one server `rpm` and `tpm` hold exactly, whatever the number of
workers. Every `sync_interval_s` each worker writes what it counted since its last sync to the
store (additive, so any number of servers can) and reads back every server's totals; the
server's workers sync one at a time, and each notes what of the totals this server wrote, so a
server admits against (the other servers' totals at its last sync + its own count now). Across
N servers a key can therefore overshoot by what the other servers admit within one sync
interval: the measured tolerance is in the docs (how-to/teams-and-budgets). Minute windows are
clock minutes (a burst across a minute boundary can see up to twice the rate); `Retry-After`
says when the current window ends.

Budgets reserve like the minute limits: a request reserves its estimate (`reserve_estimate`)
against the day's and month's budget when admitted and settles to its actual use when it ends.
It is admitted when spent + reserved by requests in flight + its own estimate fits the budget,
or, when it does not fit, only if nothing of the family is in flight and some budget is left:
past the point where estimates fit, requests run one at a time on the remainder. So on one
server a family's spend passes its budget by at most one request's actual use, plus whatever
requests use beyond their estimates (a completion longer than `max_tokens`, or than 256 when it
sets none). Reservations are each server's own: another server sees a request's tokens only once
it has ended and the next sync (one interval later) has written them, so across N servers a
budget can also be overrun by what the other servers admit before that: each admits up to what
was left at its last sync, so at most N - 1 times that, plus one request per server.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from llmgw.core.errors import LimitsUnavailable, LlmgwError, RateLimited, SharedStoreDown
from llmgw.core.protocol.keys import LiveCounts
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway.auth import KeyCache, is_team
from llmgw.gateway.inflight import InFlight, LocalInFlight, entry
from llmgw.gateway.limit_kinds import (
    BY_NAME,
    CONCURRENT,
    DAY,
    MONTH,
    RPM,
    TPM,
    Counts,
    LimitKind,
    script_kind,
)
from llmgw.gateway.limit_refusals import refusal
from llmgw.gateway.shared_limits import Hold, Member, Refused, SharedLimits
from llmgw.gateway.usage import Tokens
from llmgw.gateway.windows import LocalWindows, Windows
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

# A limiter told of no keys sees each key as a family of one.
_NO_KEYS = KeyCache(b"", [])


@dataclass
class Ticket:
    """One admitted request: what it reserved, settled when it ends."""

    # The key and its minters: the request counts against each.
    key_ids: tuple[str, ...]
    minute: int
    reserved: int
    limiter: Limiter
    done: bool = False
    # Its lease in the shared limit store, when it was admitted there.
    hold: Hold | None = None

    def settle(self, tokens: int) -> None:
        """Replace the reservation with the tokens actually used; frees the in-flight slot."""
        if self.done:
            return
        self.done = True
        self.limiter._settle(self, tokens)

    def ended(self, _status: int, tokens: Tokens) -> None:
        """`settle` as a closer of the call (`Exchange.end`)."""
        self.settle(tokens.total)


@dataclass(frozen=True, slots=True)
class Counter:
    """Counters a call counts against apart from a key's requests (an MCP tool call: a key's or
    team's tool calls, an upstream server's calls in flight): their name in both engines, their
    limits (None: none), what they count (which kinds of the table refuse) and the refusal."""

    id: str
    per_minute: int | None
    in_flight: int | None
    counts: Counts
    # The 429 for a kind of `counts`, given what the counter had used and when.
    refuse: Callable[[LimitKind, int, datetime], RateLimited]


@dataclass
class _Counts:
    requests: int = 0
    tokens: int = 0


@dataclass
class Limiter:
    """In-memory admission against per-key limits, synced with the store."""

    store: Store | None
    now: Callable[[], datetime]
    # The install's default limits (from the cached snapshot), applied where a key sets none.
    default: Callable[[], Limits] = Limits
    # The cached keys, for each key's chain of minters and each family's members.
    keys: Callable[[], KeyCache] = lambda: _NO_KEYS
    # The other servers' counts at the last sync, per (key id, minute): every server's totals
    # less what this server had written of them.
    _shared: dict[tuple[str, int], _Counts] = field(default_factory=dict)
    # This process's counts since its last sync: what it writes to the store next.
    _local: dict[tuple[str, int], _Counts] = field(default_factory=lambda: defaultdict(_Counts))
    # Requests in flight and the tokens they reserved, per key (and per minter above it): this
    # server's, across its workers (`gateway.inflight`).
    flight: InFlight = field(default_factory=LocalInFlight)
    # This server's minute windows, across its workers (`gateway.windows`).
    windows: Windows = field(default_factory=LocalWindows)
    # The install's shared limit store (`[limits] redis_url`), when it has one: admission goes
    # there (`admit_shared`) and these counts are kept beside it for a fallback.
    shared: SharedLimits | None = None
    # Tokens used per key with a budget today / this month, as the usage table said at the
    # last sync (every server's, as far as each had flushed its usage).
    _day: dict[str, int] = field(default_factory=dict)
    _month: dict[str, int] = field(default_factory=dict)
    # Tokens this process settled since its last sync, per key with a budget: its usage meter
    # writes them at the next sync. The server's count of them (all workers) is the in-flight
    # table's `unflushed` entry; once written they move to its `flushed` entry.
    _local_tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # The server's `flushed` count per key when `_day` was read: what the server flushed since
    # is not in `_day` yet.
    _flushed_read: dict[str, int] = field(default_factory=dict)
    _budget_keys: set[str] = field(default_factory=set)
    _merged: dict[str, tuple[Limits, Limits, Limits]] = field(default_factory=dict)

    def limits_for(self, key: ApiKey) -> Limits:
        """The key's limits with the defaults filled in (cached: this runs on every request)."""
        if is_team(key):  # a team's limits are its own: the install's defaults are per key
            return key.limits
        default = self.default()
        cached = self._merged.get(key.id)
        if cached is None or cached[0] is not default or cached[1] is not key.limits:
            cached = (default, key.limits, key.limits.merged(default))
            self._merged[key.id] = cached
        return cached[2]

    def admit(self, key: ApiKey, reserve_tokens: int) -> Ticket:
        """A ticket for one request, or RateLimited (429) naming the limit and when to retry.

        The request must fit the limits of `key` and of every key above it that minted it."""
        chain = self.keys().chain(key)
        now = self.now()
        seconds = int(now.timestamp())
        minute = seconds // 60
        with self.flight.held():  # the checks and the counts, one step for all workers
            for member in chain:
                self._check(key, member, reserve_tokens, now, seconds)
            ids = tuple(m.id for m in chain)
            self._count(ids, minute, reserve_tokens)
        return Ticket(ids, minute, reserve_tokens, self)

    def _count(self, ids: tuple[str, ...], minute: int, reserve_tokens: int) -> None:
        for member_id in ids:
            local = self._local[(member_id, minute)]
            local.requests += 1
            local.tokens += reserve_tokens
            self.windows.add(member_id, minute, 1, reserve_tokens)
            self.flight.add(member_id, 1, reserve_tokens)

    def admit_calls(self, counters: Sequence[Counter]) -> Ticket:
        """A ticket for one call counted against `counters` (MCP tool calls: `Counter`), or the
        RateLimited its first full counter says; the checks and counts as one step for all the
        server's workers, as `admit`'s."""
        now = self.now()
        minute = int(now.timestamp()) // 60
        ids = tuple(c.id for c in counters)
        with self.flight.held():
            for c in counters:
                if c.per_minute is not None:
                    used = self._minute(c.id, minute)[0]
                    if used + 1 > c.per_minute:
                        raise c.refuse(script_kind(c.counts, RPM.name), used, now)
                if c.in_flight is not None:
                    used = self.flight.get(c.id)[0]
                    if used + 1 > c.in_flight:
                        raise c.refuse(script_kind(c.counts, CONCURRENT.name), used, now)
            self._count_calls(counters, minute)
        return Ticket(ids, minute, 0, self)

    def _count_calls(self, counters: Sequence[Counter], minute: int) -> None:
        for c in counters:
            self.flight.add(c.id, 1, 0)
            if c.per_minute is not None:  # only a limit per minute needs the minute's count
                self._local[(c.id, minute)].requests += 1
                self.windows.add(c.id, minute, 1, 0)

    async def admit_calls_shared(self, counters: Sequence[Counter]) -> Ticket:
        """`admit_calls` in the shared limit store, by the request kinds' admission script (a
        counter's limits in the rpm and concurrent slots): exact across every server and worker,
        with `admit_shared`'s fallback when the store does not answer."""
        shared = self.shared
        assert shared is not None
        if not shared.usable():
            return self._calls_unshared(shared, counters)
        now = self.now()
        minute = int(now.timestamp()) // 60
        members = [Member(c.id, Limits(rpm=c.per_minute, concurrent=c.in_flight),
                          self._minute(c.id, minute), None, None) for c in counters]
        try:
            outcome = await shared.admit(members, minute, 0)
        except SharedStoreDown:
            return self._calls_unshared(shared, counters)
        if isinstance(outcome, Refused):
            c = counters[outcome.index]
            raise c.refuse(script_kind(c.counts, outcome.limit), outcome.used, now)
        with self.flight.held():
            self._count_calls(counters, minute)
        return Ticket(tuple(c.id for c in counters), minute, 0, self, hold=outcome)

    def _calls_unshared(self, shared: SharedLimits, counters: Sequence[Counter]) -> Ticket:
        if shared.closed:
            raise LimitsUnavailable("the shared limit store is not answering, and this install "
                                    "refuses requests until it does (on_redis_error = closed)")
        return self.admit_calls(counters)

    async def admit_shared(self, key: ApiKey, reserve_tokens: int) -> Ticket:
        """`admit` in the shared limit store: one atomic step, exact across every server and
        worker. When the store does not answer, as `admit` (`on_redis_error = "local"`) or
        LimitsUnavailable (503, "closed"). The request is counted here too, so this server's
        counts (and the store's rate rows) stay whole for a fallback."""
        shared = self.shared
        assert shared is not None
        if not shared.usable():
            return self._unshared(shared, key, reserve_tokens)
        chain = self.keys().chain(key)
        now = self.now()
        minute = int(now.timestamp()) // 60
        members = []
        for m in chain:
            lim = self.limits_for(m)
            day: int | None = None
            month: int | None = None
            if lim.tokens_per_day is not None or lim.tokens_per_month is not None:
                self._budget_keys.add(m.id)  # the next sync reads its spend
                spent = self._unflushed(m.id)  # with the table's: a floor of the truth
                day, month = self._day.get(m.id, 0) + spent, self._month.get(m.id, 0) + spent
            members.append(Member(m.id, lim, self._minute(m.id, minute), day, month))
        try:
            outcome = await shared.admit(members, minute, reserve_tokens)
        except SharedStoreDown:
            return self._unshared(shared, key, reserve_tokens)
        if isinstance(outcome, Refused):
            member = chain[outcome.index]
            raise refusal(key, member, self.limits_for(member), BY_NAME[outcome.limit], outcome.used,
                          now)
        ids = tuple(m.id for m in chain)
        with self.flight.held():
            self._count(ids, minute, reserve_tokens)
        return Ticket(ids, minute, reserve_tokens, self, hold=outcome)

    async def live(self, key_id: str) -> LiveCounts:
        """What `key_id` (a key, or a team's limiter id) has used now: from the shared store
        when the install has one and it answers, else as this server counts."""
        now = self.now()
        minute = int(now.timestamp()) // 60
        if self.shared is not None and self.shared.usable():
            try:
                r, t, in_flight, day, month = await self.shared.live(key_id, minute)
                return LiveCounts(source="redis", requests_this_minute=r, tokens_this_minute=t,
                                  in_flight=in_flight, tokens_today=day, tokens_this_month=month)
            except SharedStoreDown:
                pass
        requests, tokens = self._minute(key_id, minute)
        spent = self._unflushed(key_id)
        return LiveCounts(source="this server", requests_this_minute=requests,
                          tokens_this_minute=tokens, in_flight=self.flight.get(key_id)[0],
                          tokens_today=self._day.get(key_id, 0) + spent,
                          tokens_this_month=self._month.get(key_id, 0) + spent)

    def _unshared(self, shared: SharedLimits, key: ApiKey, reserve_tokens: int) -> Ticket:
        if shared.closed:
            raise LimitsUnavailable("the shared limit store is not answering, and this install "
                                    "refuses requests until it does (on_redis_error = closed)")
        return self.admit(key, reserve_tokens)

    def _check(self, key: ApiKey, member: ApiKey, reserve_tokens: int, now: datetime,
               seconds: int) -> None:
        """RateLimited when one more request of `key` is over `member`'s limits (`now`, in
        whole `seconds` since the epoch)."""
        lim = self.limits_for(member)
        mid = member.id
        used_requests, used_tokens = self._minute(mid, seconds // 60)
        if lim.rpm is not None and used_requests + 1 > lim.rpm:
            raise refusal(key, member, lim, RPM, used_requests, now)
        if lim.tpm is not None and used_tokens + reserve_tokens > lim.tpm and used_tokens > 0:
            raise refusal(key, member, lim, TPM, used_tokens, now)
        in_flight, reserved = self.flight.get(mid)
        if lim.concurrent is not None and in_flight + 1 > lim.concurrent:
            raise refusal(key, member, lim, CONCURRENT, in_flight, now)
        if lim.tokens_per_day is None and lim.tokens_per_month is None:
            return
        self._budget_keys.add(mid)
        spent = self._unflushed(mid)
        held = reserved + reserve_tokens
        if lim.tokens_per_day is not None:
            total = self._day.get(mid, 0) + spent
            if _over(total, held, in_flight, lim.tokens_per_day):
                raise refusal(key, member, lim, DAY, total, now)
        if lim.tokens_per_month is not None:
            total = self._month.get(mid, 0) + spent
            if _over(total, held, in_flight, lim.tokens_per_month):
                raise refusal(key, member, lim, MONTH, total, now)

    def _minute(self, key_id: str, minute: int) -> tuple[int, int]:
        """The key's requests and tokens in `minute`: this server's now, the others' at the last
        sync."""
        requests, tokens = self.windows.get(key_id, minute)
        others = self._shared.get((key_id, minute))
        if others is None:
            return requests, tokens
        return requests + others.requests, tokens + others.tokens

    def _unflushed(self, key_id: str) -> int:
        """Tokens the server's workers settled for the key that `_day` and `_month` lack: not
        yet written to the usage table, or written since they were read."""
        unflushed, flushed_name = _budget_names(key_id)
        waiting = self.flight.get(unflushed)[1]
        flushed = self.flight.get(flushed_name)[1] - self._flushed_read.get(key_id, 0)
        # A worker that died took its part of `flushed` along: never count below nothing.
        return waiting + max(flushed, 0)

    def _settle(self, ticket: Ticket, tokens: int) -> None:
        if ticket.hold is not None and self.shared is not None:
            self.shared.settle(ticket.hold, tokens)
        budgets = self._budget_keys
        # Nothing to move in the windows when the use was the reservation (a tool call's: none).
        delta = tokens - ticket.reserved
        with self.flight.held():
            for key_id in ticket.key_ids:
                self.flight.add(key_id, -1, -ticket.reserved)
                if delta:
                    self.windows.add(key_id, ticket.minute, 0, delta)
                if key_id in budgets:
                    self.flight.add(_budget_names(key_id)[0], 0, tokens)
                    self._local_tokens[key_id] += tokens
        if delta:
            for key_id in ticket.key_ids:
                self._local[(key_id, ticket.minute)].tokens += delta

    async def sync(self, flush_usage: Callable[[], Awaitable[None]] | None = None) -> None:
        """Write this process's counts, read everyone's.

        The server's processes sync one at a time (`Windows.sync_lock`): what this server has
        written of each window (counted in the windows under a name of its own) then cannot move
        between the totals' read and the note of it, so (totals - what this server wrote) is the
        other servers' part, to which admission adds the server's own count now.

        Budget tokens are read from the usage table. A token a worker settled is in the server's
        `unflushed` count until its usage meter has written it, then in `flushed`; a sync notes
        `flushed` beside what it read (no other worker flushes meanwhile), so admission counts
        each token the server settled in the table or in memory, never in neither.
        """
        if self.store is None:
            return
        lock = self.windows.sync_lock()
        await asyncio.to_thread(lock.__enter__)
        try:
            await self._sync(self.store, flush_usage)
        finally:
            lock.__exit__(None, None, None)

    async def _sync(self, store: Store, flush_usage: Callable[[], Awaitable[None]] | None) -> None:
        local, self._local = self._local, defaultdict(_Counts)
        spent, self._local_tokens = self._local_tokens, defaultdict(int)
        now = self.now()
        minute = int(now.timestamp()) // 60
        deltas = {k: (c.requests, c.tokens) for k, c in local.items() if c.requests or c.tokens}
        # A family's budget counts what every key in it used, on any server.
        families = self.keys()
        members = {k: families.family(k) for k in self._budget_keys}
        budget_keys = sorted({m for ids in members.values() for m in ids})

        def read() -> tuple[dict[tuple[str, int], tuple[int, int]], dict[str, int], dict[str, int]]:
            rates = store.usage.rates([minute - 1, minute])
            if minute % 10 == 0:
                store.usage.prune_rates(minute - 5)
            day = store.usage.tokens_since(budget_keys, now.strftime("%Y-%m-%d"))
            month = store.usage.tokens_since(budget_keys, now.strftime("%Y-%m-01"))
            return rates, day, month

        try:
            if deltas:
                await asyncio.to_thread(store.usage.add_rates, deltas)
        except Exception:
            self._keep(local, spent)
            raise
        with self.flight.held():  # what this server has written, beside what it counted
            for (key_id, m), (r, t) in deltas.items():
                self.windows.add(entry("written", key_id), m, r, t)
        try:
            if flush_usage is not None:
                await flush_usage()
        except Exception:
            self._keep({}, spent)
            raise
        with self.flight.held():  # written: from the server's unflushed tokens to its flushed
            for key_id, t in spent.items():
                unflushed, flushed_name = _budget_names(key_id)
                self.flight.add(unflushed, 0, -t)
                self.flight.add(flushed_name, 0, t)
        rates, day, month = await asyncio.to_thread(read)
        # One synchronous step: the totals, and what of them this server wrote.
        shared = {}
        with self.flight.held():
            for (key_id, m), (r, t) in rates.items():
                mine_r, mine_t = self.windows.get(entry("written", key_id), m)
                shared[(key_id, m)] = _Counts(max(r - mine_r, 0), max(t - mine_t, 0))
            self._flushed_read = {k: self.flight.get(_budget_names(k)[1])[1] for k in members}
        self._shared = shared
        self._day = {k: sum(day.get(m, 0) for m in ids) for k, ids in members.items()}
        self._month = {k: sum(month.get(m, 0) for m in ids) for k, ids in members.items()}

    def _keep(self, local: dict[tuple[str, int], _Counts], spent: dict[str, int]) -> None:
        """Keep what a failed sync did not write for the next try; admission goes on from
        memory meanwhile."""
        for k, c in local.items():
            self._local[k].requests += c.requests
            self._local[k].tokens += c.tokens
        for key_id, t in spent.items():
            self._local_tokens[key_id] += t

    async def run(self, interval_s: float, flush_usage: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sync(flush_usage)
            except LlmgwError as exc:  # the database is down: said in one line, every time
                logger.warning("limit sync failed (%s); each server admits from memory until it "
                               "works", exc.message)
            except Exception:
                logger.exception("limit sync failed; each server admits from memory until it works")


@functools.lru_cache(maxsize=4096)
def _budget_names(key_id: str) -> tuple[str, str]:
    """The in-flight table's names for a key's settled tokens not yet in the usage table, and
    for those written since (made once per key: this runs on every request with a budget)."""
    return entry("unflushed", key_id), entry("flushed", key_id)


def _over(spent: int, reserved: int, in_flight: int, budget: int) -> bool:
    """Whether a request is refused. While some budget is left, it runs if it fits beside every
    reservation in flight, or, past that point, alone on what is left."""
    return spent >= budget or (spent + reserved > budget and in_flight > 0)


def reserve_estimate(max_tokens: int | None, body_len: int) -> int:
    """Tokens a request may use: its max_tokens (or 256) plus about one per 4 bytes of body."""
    return (max_tokens or 256) + math.ceil(body_len / 4)
