"""People in the console: signing them in from what the identity provider said, their
server-side sessions, and their roles.

A page must not cost a store read in the common case, yet a session ended on one server must be
refused by all. So each worker caches the sessions it has looked up, keyed by the browser's
token, and drops the whole cache when the store's revision moves: ending a session, changing a
role and removing a user all move it, so every worker refuses the session once its snapshot
reads the new revision (within `refresh_interval_s`). A state-changing request does not wait
for that: `resolve(..., fresh=True)` reads the store.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from llmgw.core import audit
from llmgw.core.clock import Clock
from llmgw.core.errors import NotFound, RateLimited, SignInRefused
from llmgw.core.settings import SsoSettings
from llmgw.core.users import ConsoleSession, Grant, Person, User, grant_for
from llmgw.store.service import AdminService, OnChange
from llmgw.store.signin_repo import WINDOW
from llmgw.store.store import Store

# A session's last use is written at most this often: the idle timeout is that much coarser, and
# a busy console costs one write a minute per session, not one per page.
TOUCH_S = 60.0
# Sessions a worker caches; past this the cache starts over (a flood of tokens costs reads).
CACHE_MAX = 4096


@dataclass(frozen=True)
class SignedIn:
    """What a checked ID token says of the person (`api.console.oidc.Identity` adds the token)."""

    issuer: str
    subject: str
    email: str | None
    email_verified: bool
    name: str | None
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Visit:
    """A live session and its user, as a page sees them."""

    session: ConsoleSession
    user: User
    token: str

    @property
    def person(self) -> Person | None:
        """The person acting, or None when their account has no role (no access)."""
        return Person(self.user, self.user.grant) if self.user.grant is not None else None



class People(AdminService):
    """Signs people in and out and keeps their sessions; `revision` is the store revision this
    worker's snapshot has read (the cache lives as long as it stays)."""

    def __init__(self, store: Store, clock: Clock, sso: SsoSettings,
                 revision: Callable[[], int],
                 on_change: OnChange | None = None) -> None:
        # Told after a change that moved the revision: this server's snapshot (and so its
        # cache) takes it before the call answers, not at the next poll.
        super().__init__(store, clock, on_change)
        self._sso = sso
        self._revision = revision
        self._cache: dict[str, Visit] = {}
        self._cached_at = -1

    @property
    def max_age_s(self) -> float:
        """How long a session lasts at most (its cookie too)."""
        return self._sso.max_age_s

    def _grant(self, who: SignedIn) -> Grant | None:
        return grant_for(who.groups, self._sso.mapping, self._sso.default_grant)

    def _check_domain(self, who: SignedIn) -> None:
        domains = [d.lower().lstrip("@") for d in self._sso.allowed_domains]
        if not domains:
            return
        email = (who.email or "").lower()
        if not who.email_verified or email.rpartition("@")[2] not in domains:
            raise SignInRefused("this account's email is not of a domain allowed to sign in")

    async def attempt(self, address: str) -> None:
        """Count a sign-in attempt from `address`; RateLimited past `signin_per_minute`."""
        now = self._clock.now()
        count, began = await asyncio.to_thread(self._store.signins.attempt, address, now)
        if count > self._sso.signin_per_minute:
            rest = (began + WINDOW - now).total_seconds()  # the window is the address's own
            raise RateLimited("Too many sign-in attempts from this address: wait a minute.",
                              max(1, math.ceil(rest)), code="signin_rate_exceeded")

    async def sign_in(self, who: SignedIn, address: str) -> tuple[str, Visit]:
        """A new session for the person the provider signed in: its token and the visit."""
        now = self._clock.now()
        with audit.acting(_by(who)), audit.from_address(address):
            user = await self._signed_in(who, now)
            token, session = await asyncio.to_thread(
                self._store.sessions.start, user.id, address, now,
                timedelta(seconds=self._sso.max_age_s), self._refresh_at(now))
        return token, self._keep(Visit(session, user, token))

    async def refreshed(self, visit: Visit, who: SignedIn, address: str) -> Visit:
        """The session after the provider signed the same person in again: their groups read
        anew, the next refresh due later."""
        if (who.issuer, who.subject) != (visit.user.issuer, visit.user.subject):
            await self.end(visit, "another account", address)
            raise SignInRefused("the identity provider signed in another account: sign in again")
        now, refresh_at = self._clock.now(), self._refresh_at(self._clock.now())
        with audit.acting(_by(who)), audit.from_address(address):
            user = await self._signed_in(who, now)
            await asyncio.to_thread(self._store.sessions.seen, visit.session.id, now, refresh_at)
        session = visit.session.model_copy(update={"last_seen_at": now, "refresh_at": refresh_at})
        return self._keep(Visit(session, user, visit.token))

    async def _signed_in(self, who: SignedIn, now: datetime) -> User:
        """The user as the provider says now (email, name, and the grant of their groups)."""
        self._check_domain(who)
        return await asyncio.to_thread(self._store.users.signed_in, who.issuer, who.subject,
                                       _verified(who), who.name, self._grant(who), now)

    def _refresh_at(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self._sso.refresh_s)

    async def resolve(self, token: str | None, *, fresh: bool = False) -> Visit | None:
        """The live session of a browser's token, or None; `fresh` reads the store, whatever
        the cache holds (a state-changing request)."""
        if not token:
            return None
        if self._cached_at != self._revision():
            self._cache, self._cached_at = {}, self._revision()
        visit = None if fresh else self._cache.get(token)
        if visit is None:
            visit = await asyncio.to_thread(self._load, token)
            if visit is None:
                self._cache.pop(token, None)
                return None
        now = self._clock.now()
        if not visit.session.live(now, self._sso.idle_timeout_s):
            self._cache.pop(token, None)
            return None
        if (now - visit.session.last_seen_at).total_seconds() >= TOUCH_S:
            await asyncio.to_thread(self._store.sessions.seen, visit.session.id, now)
            visit = Visit(visit.session.model_copy(update={"last_seen_at": now}), visit.user, token)
        return self._keep(visit)

    def due_refresh(self, visit: Visit) -> bool:
        """Whether the provider must be asked again before this session does more."""
        refresh_at = visit.session.refresh_at
        return refresh_at is not None and self._clock.now() >= refresh_at

    def _load(self, token: str) -> Visit | None:
        session = self._store.sessions.find(token)
        if session is None or session.ended_at is not None:
            return None
        try:
            user = self._store.users.get(session.user_id)
        except NotFound:  # removed since
            return None
        return Visit(session, user, token)

    def _keep(self, visit: Visit) -> Visit:
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        self._cache[visit.token] = visit
        return visit

    async def end(self, visit: Visit, reason: str, address: str) -> None:
        """End a session everywhere (sign-out, or a refresh the provider refused)."""
        self._cache.pop(visit.token, None)
        who = f"{visit.user.verified_email or visit.user.subject} (sso)"
        with audit.acting(who), audit.from_address(address):
            await asyncio.to_thread(self._store.sessions.end, visit.session.id, reason,
                                    self._clock.now())
        await self._changed()

    # The admin's side: `ctl user ...` and the console's users page.

    async def users(self) -> list[User]:
        return await asyncio.to_thread(self._store.users.list)

    async def user(self, ref: str) -> User:
        """A user by id or verified email (in any case): a role set by email can never land
        on an account that only claims that email."""
        found = [u for u in await self.users()
                 if ref == u.id or ref.lower() == (u.verified_email or "").lower()]
        if len(found) != 1:
            raise NotFound(f"no single user matches {ref!r} (give its id)" if found else
                           f"user {ref!r} does not exist", param="user")
        return found[0]

    async def set_grant(self, ref: str, grant: Grant | None) -> User:
        """Set a user's role by hand (None: no access); the groups no longer change it."""
        user = await self.user(ref)
        changed = await asyncio.to_thread(self._store.users.set_grant, user.id, grant,
                                          self._clock.now())
        await self._changed()
        return changed

    async def end_sessions(self, ref: str) -> tuple[User, int]:
        """End every session of a user; the user and how many there were."""
        user = await self.user(ref)
        ended = await asyncio.to_thread(self._store.sessions.end_for_user, user.id,
                                        "ended by an admin", self._clock.now())
        await self._changed()
        return user, ended

    async def session_counts(self) -> dict[str, int]:
        """Live sessions per user id, in one read."""
        live = await asyncio.to_thread(self._store.sessions.list, None, self._clock.now())
        return dict(Counter(s.user_id for s in live))

    async def sessions(self, user_id: str) -> list[ConsoleSession]:
        """A user's live sessions (by the user's id)."""
        return await asyncio.to_thread(self._store.sessions.list, user_id, self._clock.now())

    async def remove(self, ref: str) -> User:
        """Forget a user and end their sessions (they may sign in again, as new)."""
        user = await self.user(ref)
        await asyncio.to_thread(self._store.users.remove, user.id, self._clock.now())
        await self._changed()
        return user


def _verified(who: SignedIn) -> str | None:
    return who.email if who.email_verified else None


def _by(who: SignedIn) -> str:
    return f"{_verified(who) or who.subject} (sso)"

