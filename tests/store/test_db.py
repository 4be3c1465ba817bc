"""The database boundary: an unreachable database is one retryable error, its password hidden."""

from __future__ import annotations

import pytest

from llmgw.core.errors import ConfigError, StoreUnavailable
from llmgw.store.db import migrate, open_engine, read_revision
from tests.support.server_process import free_port


def test_an_unreachable_database_is_store_unavailable_without_its_password() -> None:
    engine = open_engine(f"postgresql+psycopg://llmgw:s3cret@127.0.0.1:{free_port()}/llmgw")
    try:
        with pytest.raises(StoreUnavailable, match=r"llmgw:\*\*\*@127\.0\.0\.1") as caught:
            read_revision(engine)
        assert "s3cret" not in caught.value.message
        # At startup the same outage stops the server with one line saying what failed.
        with pytest.raises(ConfigError, match="database migration failed: the database"):
            migrate(engine)
    finally:
        engine.dispose()


def test_a_password_given_as_a_query_parameter_is_hidden_too() -> None:
    engine = open_engine(
        f"postgresql+psycopg://llmgw@127.0.0.1:{free_port()}/llmgw?sslmode=disable&password=s3cret")
    try:
        with pytest.raises(StoreUnavailable) as caught:
            read_revision(engine)
        assert "s3cret" not in caught.value.message
        assert "password=***" in caught.value.message
    finally:
        engine.dispose()
