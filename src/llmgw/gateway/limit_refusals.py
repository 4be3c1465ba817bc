"""The 429 a request over a key's or team's limit gets: its message, code and `Retry-After`."""

from __future__ import annotations

from datetime import datetime, timedelta

from llmgw.core.errors import RateLimited
from llmgw.core.types import ApiKey, Limits
from llmgw.gateway.auth import is_team


def _whose(key: ApiKey, member: ApiKey) -> str:
    if is_team(member):
        return f"its team {member.name}'s"
    return "its" if member.id == key.id else f"{member.label}'s (shared by the keys it minted)"


def refusal(key: ApiKey, member: ApiKey, lim: Limits, limit: str, used: int,
            now: datetime) -> RateLimited:
    """The 429 for `key` over `member`'s `limit` (rpm, tpm, concurrent, day or month), of which
    `member` had used `used`; counted by this server or in the shared store, said the same way."""
    retry = 60 - now.second
    if limit == "rpm":
        return RateLimited(f"key {key.label} is over {_whose(key, member)} limit of {lim.rpm} "
                           "requests per minute", retry, code="rate_limit_rpm")
    if limit == "tpm":
        return RateLimited(f"key {key.label} is over {_whose(key, member)} limit of {lim.tpm} "
                           "tokens per minute", retry, code="rate_limit_tpm")
    if limit == "concurrent":
        family = "" if member.id == key.id else f" of team {member.name}" if is_team(member) \
            else f" of {member.label}'s family"
        return RateLimited(f"key {key.label} has {lim.concurrent} requests{family} in flight "
                           "already", 1, code="rate_limit_concurrent")
    if limit == "day":
        return _spent(key, member, lim.tokens_per_day or 0, "today", used, _to_next_day(now))
    return _spent(key, member, lim.tokens_per_month or 0, "this month", used, _to_next_month(now))


def _spent(key: ApiKey, member: ApiKey, budget: int, when: str, spent: int,
           to_reset: int) -> RateLimited:
    # Refused only for reservations in flight: they settle soon, maybe below what they hold.
    retry = to_reset if spent >= budget else 1
    return RateLimited(f"key {key.label} has used or reserved {_whose(key, member)} {budget} "
                       f"tokens for {when}", retry, code="budget_exceeded")


def _to_next_month(now: datetime) -> int:
    this_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    first = (this_month + timedelta(days=32)).replace(day=1)
    return max(1, int((first - now).total_seconds()))


def _to_next_day(now: datetime) -> int:
    seconds = now.hour * 3600 + now.minute * 60 + now.second
    return max(1, 86400 - seconds)
