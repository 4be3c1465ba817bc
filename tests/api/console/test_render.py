"""How pages write sizes and times."""

from __future__ import annotations

from datetime import UTC, datetime

from llmgw.api.console.render import _size, _when


def test_sizes_read_as_people_read_them() -> None:
    assert [_size(n) for n in (None, 0, 512, 2048, 5 * 1024**2, int(3.2 * 1024**3))] == \
        ["", "0 B", "512 B", "2.0 KB", "5.0 MB", "3.2 GB"]


def test_times_are_shown_to_the_second_whether_a_datetime_or_its_json() -> None:
    at = datetime(2026, 11, 30, 23, 5, 1, 123456, tzinfo=UTC)
    assert _when(at) == _when(at.isoformat()) == "2026-11-30 23:05:01"
    assert _when(None) == "" and _when("not a time") == "not a time"
