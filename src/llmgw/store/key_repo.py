"""API keys in the database (hashes only)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, update

from llmgw.core.audit import AuditKind
from llmgw.core.errors import Conflict, Forbidden, NotFound, RateLimited, Unauthenticated
from llmgw.core.types import ApiKey, KeyScope, Limits, ToolGrants
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import api_keys, settings


def _to_key(row: Any) -> ApiKey:
    return ApiKey(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        last4=row.last4,
        hash=row.hash,
        scope=KeyScope(row.scope),
        models=row.models,
        expires_at=utc(row.expires_at),
        revoked=row.revoked,
        by=row.by,
        created_at=utc(row.created_at),
        limits=Limits.model_validate(row.limits or {}),
        note=row.note or "",
        minted_by=row.minted_by,
        node_id=row.node_id,
        team=row.team,
        team_id=row.team_id,
        team_admin=bool(row.team_admin),
        tools=ToolGrants.model_validate(row.tools or {}),
    )


@dataclass(frozen=True)
class MintCaps:
    """How many keys a user key's family may mint: the family is the key an admin made and every
    key minted beneath it, so a minted key's own mints count against the same caps."""

    live: int  # live (neither revoked nor expired) minted keys at once
    per_hour: int  # keys minted in any hour, live or not (short-lived keys cannot churn)


class KeyRepo:
    """Stored keys."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[ApiKey]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at)).all()
        return [_to_key(r) for r in rows]

    def get(self, key_id: str) -> ApiKey:
        with self._engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).one_or_none()
        if row is None:
            raise NotFound(f"key {key_id!r} does not exist", param="id")
        return _to_key(row)

    def create(self, key: ApiKey, revoke: str | None = None, caps: MintCaps | None = None) -> None:
        """Store a new key (and, for a rotation, revoke the old one in the same transaction).

        Conflict when a live key already has its name (the old key of a rotation aside); with
        `caps`, Forbidden or RateLimited when the minter's family has minted its share."""
        values = key.model_dump()
        values["scope"] = key.scope.value
        values["limits"] = key.limits.model_dump(exclude_none=True)
        now = key.created_at or datetime.now(UTC)
        with self._engine.begin() as conn:
            # Written first, so key writes on every server run one at a time: the checks below
            # see every key made before this one, and none is made meanwhile.
            bump_revision(conn)
            rows = _rows(conn)
            if any(r.name == key.name and r.id != revoke and _live(r, now) for r in rows):
                raise Conflict(f"a live key is already named {key.name!r}: names find keys, so "
                               "pick another (or revoke that key first)", param="name")
            if caps is not None and key.minted_by is not None:
                _check_caps(rows, key.minted_by, caps, now)
            elif caps is not None:
                # A person (a team admin signed in to the console) is no key: their keys start
                # no family, so the caps count every key they made.
                _check_counts([r for r in rows if r.by == key.by and r.minted_by is None], caps,
                              now, "you")
            conn.execute(insert(api_keys).values(**values))
            if revoke is not None:
                conn.execute(update(api_keys).where(api_keys.c.id == revoke).values(revoked=True))
                # The keys the old one minted stay in the family, under its successor.
                conn.execute(update(api_keys).where(api_keys.c.minted_by == revoke)
                             .values(minted_by=key.id))
                record(conn, AuditKind.KEY, "revoke", revoke, {"revoked": False},
                       {"revoked": True, "rotated_to": key.id}, now)
            record(conn, AuditKind.KEY, "rotate" if revoke else "create", key.id, None,
                   audited(key), now)

    def revoke(self, key_id: str) -> int:
        """Revoke a key and, for a user key, every key minted beneath it; how many of those."""
        with self._engine.begin() as conn:
            bump_revision(conn)  # first: a mint under this key waits, then sees it revoked
            rows = _rows(conn)
            target = next((r for r in rows if r.id == key_id), None)
            if target is None:
                raise NotFound(f"key {key_id!r} does not exist", param="id")
            # An admin key's keys start families of their own: they stay.
            beneath = [r.id for r in _beneath(rows, key_id)] if target.scope == "user" else []
            conn.execute(update(api_keys).where(api_keys.c.id.in_([key_id, *beneath]))
                         .values(revoked=True))
            if not target.revoked:
                record(conn, AuditKind.KEY, "revoke", key_id,
                       {"name": target.name, "revoked": False},
                       {"name": target.name, "revoked": True, "minted_keys_revoked": beneath})
        return len(beneath)

    def default_limits(self) -> Limits:
        with self._engine.connect() as conn:
            value = conn.execute(
                select(settings.c.value).where(settings.c.name == "default_limits")
            ).scalar_one_or_none()
        return Limits.model_validate(value or {})

    def set_default_limits(self, limits: Limits) -> None:
        with self._engine.begin() as conn:
            old = conn.execute(select(settings.c.value)
                               .where(settings.c.name == "default_limits")).scalar_one_or_none()
            conn.execute(delete(settings).where(settings.c.name == "default_limits"))
            new = limits.model_dump(exclude_none=True)
            conn.execute(insert(settings).values(name="default_limits", value=new))
            record(conn, AuditKind.LIMITS, "set", "default", old or {}, new)
            bump_revision(conn)


def audited(key: ApiKey) -> dict[str, Any]:
    """What the audit log says of a key: everything but its hash (the secret is never stored)."""
    out = key.model_dump(mode="json", exclude={"hash"})
    out["limits"] = key.limits.model_dump(exclude_none=True)  # as stored: the limits it has
    return out


def _rows(conn: Connection) -> Sequence[Any]:
    return conn.execute(select(api_keys.c.id, api_keys.c.name, api_keys.c.scope,
                               api_keys.c.minted_by, api_keys.c.revoked, api_keys.c.expires_at,
                               api_keys.c.created_at, api_keys.c.by)).all()


def _live(row: Any, now: datetime) -> bool:
    expires = utc(row.expires_at)
    return not row.revoked and (expires is None or expires > now)


def _beneath(rows: Sequence[Any], key_id: str) -> list[Any]:
    """The user keys minted by `key_id`, and by them, at any depth."""
    children: dict[str, list[Any]] = {}
    for r in rows:
        if r.minted_by is not None and r.scope == "user":
            children.setdefault(r.minted_by, []).append(r)
    found: list[Any] = []
    todo, seen = [key_id], {key_id}
    while todo:
        for child in children.get(todo.pop(), []):
            if child.id not in seen:
                seen.add(child.id)
                found.append(child)
                todo.append(child.id)
    return found


def _check_caps(rows: Sequence[Any], minter_id: str, caps: MintCaps, now: datetime) -> None:
    by_id = {r.id: r for r in rows}
    minter = by_id.get(minter_id)
    if minter is None or minter.revoked:  # revoked since the request was authenticated
        raise Unauthenticated("Incorrect API key provided")
    root, seen = minter, {minter.id}
    while root.minted_by in by_id and by_id[root.minted_by].scope == "user" \
            and root.minted_by not in seen:  # the family's first key: the one an admin made
        root = by_id[root.minted_by]
        seen.add(root.id)
    _check_counts(_beneath(rows, root.id), caps, now, "this key's family")


def _check_counts(made: Sequence[Any], caps: MintCaps, now: datetime, whose: str) -> None:
    """Forbidden past `caps.live` live keys among `made`, RateLimited past `caps.per_hour` made
    in the last hour."""
    live = sum(1 for r in made if _live(r, now))
    holds = "hold" if whose == "you" else "holds"
    if live >= caps.live:
        raise Forbidden(f"{whose} already {holds} {caps.live} live minted keys, the most "
                        "allowed: an admin can revoke some, or they expire")
    hour_ago = now - timedelta(hours=1)
    recent = sorted(utc(r.created_at) or now for r in made if (utc(r.created_at) or now) > hour_ago)
    if len(recent) >= caps.per_hour:
        wait = (recent[-caps.per_hour] - hour_ago).total_seconds()
        have = "have" if whose == "you" else "has"
        raise RateLimited(f"{whose} {have} minted {caps.per_hour} keys in the last hour, the most "
                          "allowed", max(1, math.ceil(wait)), code="mint_rate_exceeded")
