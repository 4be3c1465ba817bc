"""Fixtures of the gateway's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.gateway.inflight import SharedInFlight


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[SharedInFlight, SharedInFlight]]:
    """One server's in-flight table, as its worker 0 and worker 1 map it."""
    first = SharedInFlight(tmp_path / "in-flight", 2, 0, create=True)
    second = SharedInFlight(tmp_path / "in-flight", 2, 1)
    yield first, second
    second.close()
    first.close()
