"""Creating, rotating and revoking API keys, with the minting rules."""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Callable
from datetime import datetime, timedelta

from llmgw.core.clock import Clock
from llmgw.core.errors import Forbidden, InvalidRequest, NotFound
from llmgw.core.ids import hash_key, key_prefix, new_api_key, new_id
from llmgw.core.protocol.keys import KeyRequest
from llmgw.core.types import ApiKey, KeyScope, Limits, Team, ToolGrants, UsageRow
from llmgw.core.users import is_person, who
from llmgw.store.key_repo import MintCaps
from llmgw.store.service import AdminService, OnChange
from llmgw.store.store import Store

# What a user key's family (the key an admin made and all minted beneath it) may mint; admin
# keys mint without a cap.
MINT_CAPS = MintCaps(live=100, per_hour=100)


class KeyAdmin(AdminService):
    """Keys are shown once, at creation or rotation; only their keyed hash is stored."""

    def __init__(
        self, store: Store, clock: Clock, secret: bytes,
        default_limits: Callable[[], Limits], on_change: OnChange | None = None,
        caps: MintCaps = MINT_CAPS,
    ) -> None:
        super().__init__(store, clock, on_change)
        self._caps = caps
        self._secret = secret
        self._default = default_limits

    async def keys(self, viewer: ApiKey | None = None) -> list[ApiKey]:
        """Every key `viewer` may see (see `visible`); all of them without a viewer."""
        keys = await asyncio.to_thread(self._store.keys.list)
        if viewer is not None and viewer.team_admin and viewer.team_id is None \
                and viewer.team is not None:
            # A person's grant names a team: the team of that name as it is now.
            team = await self._team_named(viewer.team)
            viewer = viewer.model_copy(update={"team_id": team.id if team else None})
        return visible(viewer, keys)

    async def _team_named(self, name: str) -> Team | None:
        return next((t for t in await asyncio.to_thread(self._store.teams.list)
                     if t.name == name), None)

    async def find(self, ref: str, viewer: ApiKey | None = None) -> ApiKey:
        """A key by id, name (a live key's first, as names are unique among live keys; then an
        expired one's) or visible prefix, among the keys `viewer` may see: any other is as
        unknown as one that does not exist."""
        keys = await self.keys(viewer)
        now = self._clock.now()
        named = [k for k in keys if k.name == ref and not k.revoked]
        hits = [k for k in keys if k.id == ref] \
            or [k for k in named if k.expires_at is None or k.expires_at > now] or named \
            or [k for k in keys if ref.startswith(k.prefix) or k.prefix == ref]
        if len(hits) != 1:
            raise NotFound(f"no single key matches {ref!r} (give its id)" if hits else
                           f"key {ref!r} does not exist", param="id")
        return hits[0]

    async def create(self, req: KeyRequest, minter: ApiKey) -> tuple[ApiKey, str]:
        """A new key within the minter's scope and limits; returns it and its secret.

        An admin key mints any scope, including `node` (a node agent's join token); a user key
        (a team admin key too) mints only user keys within its own grants and its team's, and
        its family within MINT_CAPS; a team admin person, within its team's grants; a node
        join token or a metrics key mints nothing. Conflict (409) when a live key already has
        the name."""
        if minter.scope not in (KeyScope.ADMIN, KeyScope.USER):
            raise Forbidden(f"a {minter.scope.value} key cannot mint keys")
        if req.scope in (KeyScope.NODE, KeyScope.METRICS) and (req.models or not req.tools.empty):
            # Neither reaches the data plane: a model list would promise access it lacks.
            what, param = ("models", "models") if req.models else ("tools", "tools")
            raise InvalidRequest(f"a {req.scope.value} key takes no {what}", param=param)
        if req.node_id is not None and req.scope != KeyScope.NODE:
            raise InvalidRequest("only a node join token is bound to a node", param="node_id")
        now = self._clock.now()
        expires = req.expires_at or (now + timedelta(days=req.expires_in_days)
                                     if req.expires_in_days else None)
        if expires is not None and expires <= now:
            raise InvalidRequest("the key would expire before it is made", param="expires_at")
        models, limits, tools = req.models, req.limits, req.tools
        team = await self._team_of(req, minter)
        if minter.scope != KeyScope.ADMIN:
            # Within both the minter's grants and its team's: a team admin key's own models,
            # tools, limits and expiry bind what it mints; a person (a team admin signed in to
            # the console) is no key, so only the team bounds theirs.
            if not is_person(minter):
                models, limits, expires = self._within(minter, req, expires)
                tools = await self._tools_within(minter, tools)
            if team is not None:
                models = _within_team(team, models, req.limits)
                _tools_within_team(team, tools, Forbidden)
        elif team is not None:
            outside = [m for m in models if team.models and not _granted(m, team.models)]
            if outside:
                raise InvalidRequest(f"team {team.name} may not use models {', '.join(outside)}",
                                     param="models")
            _tools_within_team(team, tools, InvalidRequest)
        secret = new_api_key()
        key = ApiKey(
            id=new_id("key"), name=req.name, prefix=key_prefix(secret), last4=secret[-4:],
            hash=hash_key(self._secret, secret), scope=req.scope, models=models,
            expires_at=expires, by=who(minter), created_at=now,
            # A person's keys start families of their own (a team admin key's are its family):
            # the person is no key, and a key's fate follows only keys above it.
            limits=limits, note=req.note, minted_by=None if is_person(minter) else minter.id,
            node_id=req.node_id,
            team=team.name if team is not None else None,
            team_id=team.id if team is not None else None, team_admin=req.team_admin,
            tools=tools,
        )
        caps = self._caps if minter.scope == KeyScope.USER else None
        await asyncio.to_thread(self._store.keys.create, key, None, caps)
        await self._changed()
        return key, secret

    async def _team_of(self, req: KeyRequest, minter: ApiKey) -> Team | None:
        """The team the new key belongs to, under the team rules: an admin puts a user key in
        any team (and makes its team admins); a key of a team mints only for that team; a key
        of no team mints keys of no team."""
        wanted = req.team
        if minter.scope != KeyScope.ADMIN:
            if req.scope != KeyScope.USER:
                raise Forbidden(f"a user key can mint only user keys; {req.scope.value} keys "
                                "need an admin key", param="scope")
            if req.team_admin:
                raise Forbidden("only an admin key makes a team admin", param="team_admin")
            if wanted is not None and wanted != minter.team:
                raise Forbidden("a key mints keys for its own team only" if minter.team else
                                "a key of no team cannot mint keys of a team", param="team")
            wanted = minter.team
        elif req.team_admin and wanted is None:
            raise InvalidRequest("a team admin needs a team", param="team")
        if wanted is None:
            return None
        if req.scope != KeyScope.USER:
            raise InvalidRequest("only user keys belong to teams", param="team")
        team = await self._team_named(wanted)
        # A key of a team mints for that team itself, not for a later one of its name.
        if team is None or (minter.team_id is not None and team.id != minter.team_id):
            raise InvalidRequest(f"team {wanted!r} does not exist", param="team")
        return team

    def _within(
        self, minter: ApiKey, req: KeyRequest, expires: datetime | None
    ) -> tuple[list[str], Limits, datetime | None]:
        """A user key mints only user keys, for its own models, within its limits and expiry."""
        if req.scope != KeyScope.USER:
            raise Forbidden(f"a user key can mint only user keys; {req.scope.value} keys "
                            "(admin keys and node join tokens) need an admin key", param="scope")
        models = req.models or minter.models
        if minter.models:
            outside = [m for m in models if not _granted(m, minter.models)]
            if outside:
                raise Forbidden(f"this key may not grant models {', '.join(outside)}", param="models")
        own = minter.limits.merged(self._default())
        limits = req.limits.merged(own)  # unset limits inherit the minter's
        over = limits.within(own)
        if over:
            raise Forbidden(f"limits above this key's own: {', '.join(over)}", param="limits")
        if minter.expires_at is not None:
            if expires is not None and expires > minter.expires_at:
                raise Forbidden("a minted key cannot outlive the key that mints it",
                                param="expires_at")
            expires = expires or minter.expires_at
        return models, limits, expires

    async def _tools_within(self, minter: ApiKey, wanted: ToolGrants) -> ToolGrants:
        """A minted key's tools: its allow within what its minter may use (its own allow, or
        else its team's), the minter's allow when it asks for none; and the minter's denies."""
        own = minter.tools.allow
        if not own and minter.team is not None:
            team = await self._team_named(minter.team)
            own = team.tools.allow if team is not None and team.id == minter.team_id else []
        allow = wanted.allow or own
        outside = [p for p in allow if not tools_granted(p, own)]
        if outside:
            raise Forbidden(f"this key may not grant tools {', '.join(outside)}", param="tools")
        deny = sorted({*wanted.deny, *minter.tools.deny})
        return ToolGrants(allow=allow, deny=deny)

    async def revoke(self, ref: str, viewer: ApiKey | None = None) -> tuple[ApiKey, int]:
        """Revoke a key (one `viewer` may see) and every key minted beneath it; the key, and how
        many those were."""
        key = await self.find(ref, viewer)
        beneath = await asyncio.to_thread(self._store.keys.revoke, key.id)
        await self._changed()
        return await asyncio.to_thread(self._store.keys.get, key.id), beneath

    async def rotate(self, ref: str, by: ApiKey) -> tuple[ApiKey, str]:
        """A new secret with the same settings and name; the old key is revoked in the same
        write, and the keys it minted are its successor's."""
        old = await self.find(ref)
        if old.revoked:
            raise InvalidRequest(f"key {old.label} is revoked; create a new one", param="id")
        secret = new_api_key()
        key = old.model_copy(update={
            "id": new_id("key"), "prefix": key_prefix(secret), "last4": secret[-4:],
            "hash": hash_key(self._secret, secret), "created_at": self._clock.now(),
            "by": f"{who(by)}, rotating {old.label}",
        })
        await asyncio.to_thread(self._store.keys.create, key, old.id)
        await self._changed()
        return key, secret

    async def default_limits(self) -> Limits:
        return await asyncio.to_thread(self._store.keys.default_limits)

    async def set_default_limits(self, limits: Limits) -> Limits:
        await asyncio.to_thread(self._store.keys.set_default_limits, limits)
        await self._changed()
        return limits

    async def usage(self, key: str | None, model: str | None, since: str | None,
                    viewer: ApiKey | None = None, team: str | None = None) -> list[UsageRow]:
        """Usage rows, of one key when `key` names one, of one team's keys when `team` does;
        only of keys `viewer` may see (another team is as unknown as one that does not exist)."""
        if team:
            # The team of that name as it is now: a removed one's keys are none of its.
            current = await self._team_named(team)
            if current is None or (viewer is not None and viewer.scope != KeyScope.ADMIN
                                   and viewer.team != team):
                raise NotFound(f"team {team!r} does not exist", param="team")
            members = {k.id for k in await self.keys(viewer) if k.team_id == current.id}
            rows = await asyncio.to_thread(self._store.usage.usage, None, model, since)
            # With what its team admins sent from the console, counted under the team's own id.
            members.add(current.limiter_id)
            return [r for r in rows if r.key_id in members]
        if key:
            return await asyncio.to_thread(self._store.usage.usage, (await self.find(key, viewer)).id,
                                           model, since)
        rows = await asyncio.to_thread(self._store.usage.usage, None, model, since)
        if viewer is None or viewer.scope == KeyScope.ADMIN:
            return rows
        mine = {k.id for k in await self.keys(viewer)}
        if viewer.team_admin and viewer.team is not None:
            current = await self._team_named(viewer.team)
            if current is not None:
                mine.add(current.limiter_id)
        return [r for r in rows if r.key_id in mine]


def _within_team(team: Team, models: list[str], limits: Limits) -> list[str]:
    """The models a key minted for `team` gets (`models`, else the team's), Forbidden when they
    or the `limits` asked for go past the team's."""
    models = models or team.models
    outside = [m for m in models if team.models and not _granted(m, team.models)]
    if outside:
        raise Forbidden(f"team {team.name} may not use models {', '.join(outside)}", param="models")
    over = limits.merged(team.limits).within(team.limits)
    if over:
        raise Forbidden(f"limits above team {team.name}'s: {', '.join(over)}", param="limits")
    return models


def _tools_within_team(team: Team, tools: ToolGrants,
                       refusal: type[Forbidden] | type[InvalidRequest]) -> None:
    """`refusal` when a key of `team` asks for tools beyond the team's allow (when it has one)."""
    outside = [p for p in tools.allow if team.tools.allow and not tools_granted(p, team.tools.allow)]
    if outside:
        raise refusal(f"team {team.name} may not use tools {', '.join(outside)}", param="tools")


def visible(viewer: ApiKey | None, keys: list[ApiKey]) -> list[ApiKey]:
    """The keys among `keys` that `viewer` may see: all of them for an admin key (or no viewer:
    the server itself); for a team admin, its team's; for any other key, itself and the keys
    minted beneath it."""
    if viewer is None or viewer.scope == KeyScope.ADMIN:
        return keys
    if viewer.team_admin and viewer.team_id is not None:
        return [k for k in keys if k.team_id == viewer.team_id or k.id == viewer.id]
    minted: dict[str, list[str]] = {}
    for k in keys:
        if k.minted_by is not None:
            minted.setdefault(k.minted_by, []).append(k.id)
    seen, todo = {viewer.id}, [viewer.id]
    while todo:
        for child in minted.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return [k for k in keys if k.id in seen]


def _granted(wanted: str, allowed: list[str]) -> bool:
    """A plain name must match one of the allowed patterns; a pattern must be one of them
    exactly (`gemma3-?b` does not grant `gemma3-*b`, which reaches further)."""
    if any(ch in wanted for ch in "*?["):
        return wanted in allowed
    return any(fnmatch.fnmatchcase(wanted, p) for p in allowed)


def tools_granted(wanted: str, allowed: list[str]) -> bool:
    """Whether a tool pattern (`SERVER/TOOL`; a bare `SERVER` is `SERVER/*`) lies within one of
    `allowed`, part by part as `_granted` rules for models: a plain server or tool name must
    match the allowed part, a pattern must be it exactly, and `*` grants anything."""
    server, tool = _tool_parts(wanted)
    return any(_part_granted(server, s) and _part_granted(tool, t)
               for s, t in map(_tool_parts, allowed))


def _tool_parts(pattern: str) -> tuple[str, str]:
    if pattern == "*":
        return "*", "*"
    server, sep, tool = pattern.partition("/")
    return server, tool if sep else "*"


def _part_granted(wanted: str, allowed: str) -> bool:
    if allowed == "*" or wanted == allowed:
        return True
    return not any(ch in wanted for ch in "*?[") and fnmatch.fnmatchcase(wanted, allowed)
