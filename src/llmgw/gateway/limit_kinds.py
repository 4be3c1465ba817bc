"""The kinds of limit a key or team has, in one table: what sets each (a `Limits` field), the
window it counts in, the refusal it gets (code and words), what it counts (model requests, or
MCP tool calls on counters of their own) and its place in the shared admission script's
arguments. Both counting engines read it: the in-process one (`limits.Limiter`) and Redis's
(`shared_limits`, `limit_scripts.ADMIT`), so a kind is one row here plus its counters in each
engine (docs/how-to/extending.md, "A limit kind").

The tool kinds reuse the script's request slots (calls per minute in the rpm slot, calls in
flight in the concurrent slot) on counters named apart (`tool_counter`): a tool call is admitted
by the same atomic step, exact across workers and servers as the request kinds are."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Window(StrEnum):
    """What a kind counts in, which says when a refused request may try again."""

    MINUTE = "minute"  # the clock minute: retry when it ends
    IN_FLIGHT = "in flight"  # requests running now: retry in a second
    DAY = "day"  # the UTC day's tokens: retry when it ends (in a second when only reservations refuse)
    MONTH = "month"  # likewise for the UTC month


class Counts(StrEnum):
    """What a kind counts."""

    REQUESTS = "requests"  # model requests, on the key's (or team's) own counters
    TOOL_CALLS = "tool calls"  # MCP `tools/call`s, on the key's tool counters (`tool_counter`)
    SERVER_CALLS = "server calls"  # calls to one upstream MCP server, on its counter


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
    counts: Counts = Counts.REQUESTS


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

TOOL_CALLS = LimitKind("tool_calls", "tool_calls_per_minute", Window.MINUTE,
                       code="rate_limit_tool_calls",
                       words="key {key} is over {whose} limit of {limit} tool calls per minute",
                       slot=RPM.slot, counts=Counts.TOOL_CALLS)
TOOL_CONCURRENT = LimitKind("tool_concurrent", "tool_concurrent", Window.IN_FLIGHT,
                            code="rate_limit_tool_concurrent",
                            words="key {key} has {limit} tool calls{family} in flight already",
                            slot=CONCURRENT.slot, counts=Counts.TOOL_CALLS)
# An upstream MCP server's cap (`McpServer.max_concurrency`, not a `Limits` field): {key} is
# the server's name here.
SERVER_CONCURRENT = LimitKind("server_concurrent", "max_concurrency", Window.IN_FLIGHT,
                              code="mcp_server_busy",
                              words="MCP server {key} has {limit} tool calls in flight already",
                              slot=CONCURRENT.slot, counts=Counts.SERVER_CALLS)

# The request kinds in the order the engines check them, which is their order in the admission
# script's ARGV.
KINDS = (RPM, TPM, CONCURRENT, DAY, MONTH)
BY_NAME = {k.name: k for k in KINDS}
# The kinds a key or team sets on its tool calls, in the same order.
TOOL_KINDS = (TOOL_CALLS, TOOL_CONCURRENT)
# Every kind a `Limits` field sets.
KEY_KINDS = KINDS + TOOL_KINDS


def script_kind(counts: Counts, name: str) -> LimitKind:
    """The kind of `counts` in the slot the admission script names `name` (a request kind's
    name: the script checks every kind in its request slot)."""
    slot = BY_NAME[name].slot
    for kind in (*KEY_KINDS, SERVER_CONCURRENT):
        if kind.counts == counts and kind.slot == slot:
            return kind
    raise KeyError(f"no kind of {counts} in slot {slot}")


def tool_counter(member_id: str) -> str:
    """The name a key's (or team's, or server's) tool-call counters go by in both engines, apart
    from its requests'."""
    return f"mcp:{member_id}"
