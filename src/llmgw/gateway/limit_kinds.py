"""The kinds of limit a key or team has, in one table: what sets each (a `Limits` field), the
window it counts in, the refusal it gets (code and words), and its place in the shared
admission script's arguments. Both counting engines read it: the in-process one
(`limits.Limiter`) and Redis's (`shared_limits`, `limit_scripts.ADMIT`), so a kind is one row
here plus its counters in each engine (docs/how-to/extending.md, "A limit kind")."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Window(StrEnum):
    """What a kind counts in, which says when a refused request may try again."""

    MINUTE = "minute"  # the clock minute: retry when it ends
    IN_FLIGHT = "in flight"  # requests running now: retry in a second
    DAY = "day"  # the UTC day's tokens: retry when it ends (in a second when only reservations refuse)
    MONTH = "month"  # likewise for the UTC month


@dataclass(frozen=True, slots=True)
class LimitKind:
    """One kind of limit."""

    name: str  # how the engines, the admission script and the refusals name it
    field: str  # the `Limits` field that sets it (None: no such limit)
    window: Window
    code: str  # the refusal's error code
    # The refusal's words: {key} the key's label, {whose} whose limit it is, {limit} its value,
    # {family} which family's requests (for in-flight counts).
    words: str
    slot: int  # its place (1-based) among a member's limits in `limit_scripts.ADMIT`'s ARGV


RPM = LimitKind("rpm", "rpm", Window.MINUTE, code="rate_limit_rpm",
                words="key {key} is over {whose} limit of {limit} requests per minute", slot=1)
TPM = LimitKind("tpm", "tpm", Window.MINUTE, code="rate_limit_tpm",
                words="key {key} is over {whose} limit of {limit} tokens per minute", slot=2)
CONCURRENT = LimitKind("concurrent", "concurrent", Window.IN_FLIGHT,
                       code="rate_limit_concurrent",
                       words="key {key} has {limit} requests{family} in flight already", slot=3)
DAY = LimitKind("day", "tokens_per_day", Window.DAY, code="budget_exceeded",
                words="key {key} has used or reserved {whose} {limit} tokens for today", slot=4)
MONTH = LimitKind("month", "tokens_per_month", Window.MONTH, code="budget_exceeded",
                  words="key {key} has used or reserved {whose} {limit} tokens for this month", slot=5)

# In the order the engines check them, which is their order in the admission script's ARGV.
KINDS = (RPM, TPM, CONCURRENT, DAY, MONTH)
BY_NAME = {k.name: k for k in KINDS}
