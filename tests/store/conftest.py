"""The `store` fixture every store test runs on: each backend, a fresh database per test."""

from __future__ import annotations

import pytest

from llmgw.store.store import Store


@pytest.fixture
def store(any_store: Store) -> Store:
    """A migrated store on each backend (the suite's `any_store`)."""
    return any_store
