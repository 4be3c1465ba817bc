"""One table of limit kinds drives both counting engines: every `Limits` field is a kind, and
the Redis admission script reads and names the kinds as the table says."""

from __future__ import annotations

import re

from llmgw.core.types import Limits
from llmgw.gateway.limit_kinds import KINDS
from llmgw.gateway.limit_scripts import ADMIT


def test_every_limit_a_key_can_set_is_a_kind_of_the_table() -> None:
    assert sorted(k.field for k in KINDS) == sorted(Limits.model_fields)


def test_the_admission_script_takes_the_kinds_in_the_tables_order_and_names_them_alike() -> None:
    # `shared_limits` sends a member's limits in the table's order: slot i is the i-th kind.
    assert [k.slot for k in KINDS] == list(range(1, len(KINDS) + 1))
    refused = re.findall(r"'([a-z]+)'", ADMIT)
    for kind in KINDS:
        assert kind.name in refused
