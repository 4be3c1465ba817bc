"""One table of limit kinds drives both counting engines: every `Limits` field is a kind, and
the Redis admission script reads and names the kinds as the table says."""

from __future__ import annotations

import re

from llmgw.core.types import Limits
from llmgw.gateway.limit_kinds import (
    KEY_KINDS,
    KINDS,
    SERVER_CONCURRENT,
    TOOL_CALLS,
    TOOL_CONCURRENT,
    TOOL_KINDS,
    Counts,
    script_kind,
)
from llmgw.gateway.limit_scripts import ADMIT


def test_every_limit_a_key_can_set_is_a_kind_of_the_table() -> None:
    assert sorted(k.field for k in KEY_KINDS) == sorted(Limits.model_fields)


def test_the_admission_script_takes_the_kinds_in_the_tables_order_and_names_them_alike() -> None:
    # `shared_limits` sends a member's limits in the table's order: slot i is the i-th kind.
    assert [k.slot for k in KINDS] == list(range(1, len(KINDS) + 1))
    refused = re.findall(r"'([a-z]+)'", ADMIT)
    for kind in KINDS:
        assert kind.name in refused


def test_each_tool_kind_counts_in_a_request_kinds_slot_and_is_named_back_from_it() -> None:
    # Tool calls are admitted by the same script on counters of their own: a refusal the script
    # names by its request slot is the tool kind of that slot.
    for kind in (*TOOL_KINDS, SERVER_CONCURRENT):
        request_kind = next(k for k in KINDS if k.slot == kind.slot)
        assert request_kind.window == kind.window
        assert script_kind(kind.counts, request_kind.name) is kind
    assert script_kind(Counts.TOOL_CALLS, "rpm") is TOOL_CALLS
    assert script_kind(Counts.TOOL_CALLS, "concurrent") is TOOL_CONCURRENT
    assert script_kind(Counts.REQUESTS, "rpm").name == "rpm"
