"""The `store` fixture every store test runs on: each backend, a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.store.store import Store
from tests.pg import fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated store on each backend; on PostgreSQL a new empty database per test."""
    if request.param == "postgresql":
        url = fresh_database(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite:///{tmp_path / 'llmgw.db'}"
    s = Store.open(url)
    yield s
    s.close()
