"""Authenticating requests against the in-memory key cache."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from datetime import datetime

from llmgw.core.errors import Forbidden, Unauthenticated
from llmgw.core.ids import hash_key
from llmgw.core.types import TEAM_KEY_PREFIX, ApiKey, KeyScope, Limits, Team
from llmgw.core.users import Person, Role

# Tokens a key cache remembers; more live keys than this only cost the hash again.
SEEN_MAX = 4096


class KeyCache:
    """Keys by their keyed hash; rebuilt from the store when the revision changes.

    A user key's family is the key an admin made and every key minted beneath it. Families are
    worked out here, once per revision, so the request path only looks them up: `chain` (a key
    and its minters, for admission against every limit above it) and `family` (a key and all it
    minted, below any depth, for budgets). A key whose minter is revoked or expired is refused.

    A key of a team has the team last in its chain, as a key of its own (`team_key`: the team's
    limits, counted under `Team.limiter_id`), whose family is every key of the team and the
    team's own id (what its team admins send from the console is counted under it, see
    `person_key`): the limiter then holds the team's limits and budgets on top of each key's with
    the same reservations. Teams are known by id (`teams`): a key of a removed team belongs to no
    team of its name made since.
    """

    def __init__(self, secret: bytes, keys: list[ApiKey], teams: Iterable[Team] = ()) -> None:
        self._secret = secret
        self.teams = {t.id: t for t in teams}
        team_keys = {tid: team_key(t) for tid, t in self.teams.items()}
        by_id = {k.id: k for k in keys}
        self._chains = {k.id: _chain(k, by_id) for k in keys}
        members: dict[str, list[str]] = {}
        for k in keys:
            for above in self._chains[k.id]:
                members.setdefault(above.id, []).append(k.id)
            if k.team_id is not None and k.team_id in team_keys:
                members.setdefault(team_keys[k.team_id].id, []).append(k.id)
        for tk in team_keys.values():
            members[tk.id] = [tk.id, *members.get(tk.id, ())]
        self._families = {kid: tuple(ids) for kid, ids in members.items()}
        # Each key with the earliest expiry in its chain; a chain holding a revoked key is out.
        self._by_hash: dict[str, tuple[ApiKey, datetime | None]] = {}
        self._by_id: dict[str, tuple[ApiKey, datetime | None]] = {}
        for k in keys:
            chain = self._chains[k.id]
            if any(a.revoked for a in chain):
                continue
            ends = [a.expires_at for a in chain if a.expires_at is not None]
            self._by_hash[k.hash] = self._by_id[k.id] = (k, min(ends) if ends else None)
        # After the fate checks: a team is no key's minter, it only limits them.
        for k in keys:
            team = team_keys.get(k.team_id) if k.team_id is not None else None
            if team is not None:
                self._chains[k.id] = (*self._chains[k.id], team)
        # Tokens of keys let in since this cache was built (it is rebuilt, empty, on every
        # revision: a revoked key's token is gone with the cache that knew it).
        self._seen: dict[str, tuple[ApiKey, datetime | None]] = {}

    def team_named(self, name: str) -> Team | None:
        """The team that has `name` now (a person's grant names its team)."""
        return next((t for t in self.teams.values() if t.name == name), None)

    def chain(self, key: ApiKey) -> tuple[ApiKey, ...]:
        """`key`, then the key that minted it, and so on up to its family's first key."""
        return self._chains.get(key.id) or (key,)

    def family(self, key_id: str) -> tuple[str, ...]:
        """The ids of `key_id` and of every key minted beneath it."""
        return self._families.get(key_id) or (key_id,)

    def authenticate(self, authorization: str | None, now: datetime) -> ApiKey:
        """The key for an `Authorization: Bearer …` header, or Unauthenticated."""
        if not authorization:
            raise Unauthenticated(
                "Missing API key: send it as 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Authorization header must be 'Bearer <key>'")
        token = token.strip()
        # The keyed hash costs more than the rest of authentication: a key already let in
        # through this cache (this revision's keys, none revoked) is looked up by its token.
        found = self._seen.get(token)
        if found is None:
            # A dict lookup on the keyed hash: the hash comparison is not a prefix-revealing
            # string compare of the secret itself.
            found = self._by_hash.get(hash_key(self._secret, token))
            if found is None:  # unknown, revoked, or minted beneath a revoked key
                raise Unauthenticated("Incorrect API key provided")
            if len(self._seen) < SEEN_MAX:  # bounded: only keys that exist get in
                self._seen[token] = found
        return _unexpired(found, now)

    def principal(self, key_id: str, now: datetime) -> ApiKey:
        """The key with id `key_id` if a request bearing it would be let in now (not revoked,
        not expired, no minter revoked or expired), else Unauthenticated."""
        found = self._by_id.get(key_id)
        if found is None:
            raise Unauthenticated("Incorrect API key provided")
        return _unexpired(found, now)


def _unexpired(found: tuple[ApiKey, datetime | None], now: datetime) -> ApiKey:
    key, expires_at = found
    if expires_at is not None and expires_at <= now:
        raise Unauthenticated("API key has expired", code="expired_api_key")
    return key


def _chain(key: ApiKey, by_id: dict[str, ApiKey]) -> tuple[ApiKey, ...]:
    """`key` and its minters while they are user keys: a key an admin made starts a family (an
    admin's own limits and fate are not its keys'). A team admin is a user key like any other:
    the keys it mints share its limits and die with it."""
    chain = [key]
    while key.minted_by is not None and len(chain) <= len(by_id):  # bounded even on a bad cycle
        minter = by_id.get(key.minted_by)
        if minter is None or minter.scope != KeyScope.USER or key.scope != KeyScope.USER:
            break
        chain.append(minter)
        key = minter
    return tuple(chain)


def team_key(team: Team) -> ApiKey:
    """The team as the limiter sees it: a key with the team's limits that no request bears."""
    return ApiKey(id=team.limiter_id, name=team.name, prefix=TEAM_KEY_PREFIX, last4=team.name,
                  hash="", scope=KeyScope.USER, limits=team.limits)


def person_key(cache: KeyCache, person: Person, limits: Limits) -> ApiKey:
    """The key a signed-in person's requests reach the data plane as (from the console's
    playground: a person holds no key of their own). Never their admin API acting key, which is
    admin-scoped and counted nowhere.

    - a team admin acts as its team: the team's models, limits and budgets, and its use counted
      under the team's own id (`Team.limiter_id`, in the team's family), so the team is charged;
    - an admin or an operator as themselves, with any model, within `limits` (`[sso]`'s
      `playground_rpm`, `playground_concurrent` and `playground_tokens_per_day`; the kinds they
      leave unset take the install's default limits), its use counted under their user id;
    - a viewer sends nothing: Forbidden.
    """
    grant = person.grant
    if grant.role is Role.VIEWER:
        raise Forbidden("a viewer sends no requests: the playground needs another role or a key")
    base = person.key.model_copy(update={"scope": KeyScope.USER, "team_admin": False})
    if grant.role is not Role.TEAM_ADMIN:
        return base.model_copy(update={"limits": limits, "team": None})
    team = cache.team_named(grant.team or "")
    if team is None:  # as for a key whose team is gone: nothing until an admin moves them
        raise Forbidden(f"team {grant.team} does not exist: ask an admin")
    # Named as the team, as its limits' refusals name it (`limit_refusals`).
    return base.model_copy(update={"id": team.limiter_id, "name": team.name, "limits": team.limits,
                                   "team": team.name, "team_id": team.id,
                                   "by": f"{base.by}, for team {team.name}"})


def is_team(key: ApiKey) -> bool:
    """Whether `key` is a team's stand-in (see `team_key`)."""
    return key.id.startswith(TEAM_KEY_PREFIX)


def require_admin(key: ApiKey) -> None:
    """Admin endpoints take admin keys only."""
    if key.scope != KeyScope.ADMIN:
        raise Forbidden("this endpoint needs an admin key")


def may_use(key: ApiKey, model: str) -> bool:
    """Whether `key` may call `model`; admin keys and keys without a model list may use any,
    node join tokens none."""
    if key.scope == KeyScope.NODE:
        return False
    if key.scope == KeyScope.ADMIN or not key.models:
        return True
    return any(fnmatch.fnmatchcase(model, pattern) for pattern in key.models)


def team_allows(cache: KeyCache, key: ApiKey, model: str) -> bool:
    """Whether `key`'s team (if it has one) lets its keys call `model`; a key whose team is gone
    (even if a team of its name was made since) may call nothing until an admin revokes it."""
    if key.team is None and key.team_id is None:
        return True
    team = cache.teams.get(key.team_id) if key.team_id is not None else None
    if team is None:
        return False
    return not team.models or any(fnmatch.fnmatchcase(model, p) for p in team.models)
