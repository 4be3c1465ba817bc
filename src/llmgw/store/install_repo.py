"""Install-wide values every server shares: the engine key."""

from __future__ import annotations

import secrets

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from llmgw.store.schema import settings

ENGINE_KEY = "engine_key"


class InstallRepo:
    """Values made once per install, by whichever server needs them first."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def engine_key(self) -> str:
        """The key engines require on every request; made on first use. Servers send it and
        node agents hand it to their engines; clients never see it."""
        with self._engine.begin() as conn:
            row = conn.execute(select(settings.c.value).where(settings.c.name == ENGINE_KEY)).first()
            if row is not None:
                return str(row.value)
            key = "llmgw-engine-" + secrets.token_urlsafe(32)
            try:
                with conn.begin_nested():
                    conn.execute(insert(settings).values(name=ENGINE_KEY, value=key))
            except IntegrityError:  # another server made it first: theirs is the key
                row = conn.execute(
                    select(settings.c.value).where(settings.c.name == ENGINE_KEY)
                ).one()
                return str(row.value)
            return key
