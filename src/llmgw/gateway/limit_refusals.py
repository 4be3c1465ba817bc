"""The 429 a request over a key's or team's limit gets: its message, code and `Retry-After`."""

from __future__ import annotations

from datetime import datetime, timedelta

from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway.auth import is_team
from llmgw.gateway.limit_kinds import LimitKind, Window


def _whose(key: ApiKey, member: ApiKey) -> str:
    if is_team(member):
        return f"its team {member.name}'s"
    return "its" if member.id == key.id else f"{member.label}'s (shared by the keys it minted)"


def refusal(key: ApiKey, member: ApiKey, lim: Limits, kind: LimitKind, used: int,
            now: datetime) -> RateLimited:
    """The 429 for `key` over `member`'s limit of `kind`, of which `member` had used `used`;
    counted by this server or in the shared store, said the same way."""
    limit: int = getattr(lim, kind.field) or 0
    family = ""
    if kind.window == Window.IN_FLIGHT and member.id != key.id:
        family = f" of team {member.name}" if is_team(member) else f" of {member.label}'s family"
    words = kind.words.format(key=key.label, whose=_whose(key, member), limit=limit, family=family)
    if kind.window == Window.MINUTE:
        retry = 60 - now.second
    elif kind.window == Window.IN_FLIGHT:
        retry = 1
    elif used < limit:  # refused only for reservations in flight: they settle soon, maybe below
        retry = 1
    else:
        retry = _to_next_day(now) if kind.window == Window.DAY else _to_next_month(now)
    return RateLimited(words, retry, code=kind.code)


def _to_next_month(now: datetime) -> int:
    this_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    first = (this_month + timedelta(days=32)).replace(day=1)
    return max(1, int((first - now).total_seconds()))


def _to_next_day(now: datetime) -> int:
    seconds = now.hour * 3600 + now.minute * 60 + now.second
    return max(1, 86400 - seconds)
