"""Usage writes: a row the database cannot hold is refused as such, and writes nothing."""

from __future__ import annotations

import pytest

from llmgw.core.errors import StoreRefused
from llmgw.core.types import UsageRow
from llmgw.store.store import Store


def test_a_count_beyond_the_columns_range_is_refused_and_the_batch_is_not_half_written(
    store: Store,
) -> None:
    good = UsageRow(key_id="key-a", model="m", day="2026-01-01", requests=1, prompt_tokens=5)
    too_big = UsageRow(key_id="key-b", model="m", day="2026-01-01", requests=1, prompt_tokens=10**20)
    with pytest.raises(StoreRefused):
        store.usage.add_usage([good, too_big])
    assert store.usage.usage() == []

    store.usage.add_usage([good])  # the same row alone goes in
    assert [r.prompt_tokens for r in store.usage.usage()] == [5]
