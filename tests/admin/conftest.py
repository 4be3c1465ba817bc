"""The admin services' tests: a SQLite store of the test's own (the people tests ask for each
backend themselves)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite store of the test's own."""
    s = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    yield s
    s.close()
