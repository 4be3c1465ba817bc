"""Store tests run on SQLite and on a real PostgreSQL server (started once per session)."""

from __future__ import annotations

from tests.pg import postgres_url

__all__ = ["postgres_url"]
