"""Install-wide values every server shares: the engine keys' root, the judge machine, and what the
leader's judge keeper remembers."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from llmgw.core.audit import AuditKind
from llmgw.core.demand import Evicted
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision
from llmgw.store.lease_repo import Fence
from llmgw.store.schema import settings

ENGINE_KEY = "engine_key"
JUDGE_NODE = "judge_node_selector"
JUDGE_KEEPER = "judge_keeper_state"
EVICTIONS = "evictions"
# How many evictions are kept (the newest): enough to explain the last few swaps of every model.
EVICTIONS_KEPT = 50
SECRET_CHECK = "key_secret_check"
CACHE_EPOCH = "cache_epoch"
JOIN_HINT = ("copy config.toml from a server of this install (it holds the key secret every "
             "server shares) instead")


class InstallRepo:
    """Values made once per install, by whichever server needs them first."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def engine_key(self) -> str:
        """The root every node's engine key is derived from (`core.engine_keys`); made on first
        use. Only servers read it: nodes get their own node's key, clients nothing."""
        return self._first(ENGINE_KEY, "llmgw-engine-" + secrets.token_urlsafe(32))

    def judge_node_selector(self) -> dict[str, str]:
        """The labels of the judge machine (`server init --judge-node`); empty when none."""
        with self._engine.connect() as conn:
            row = conn.execute(select(settings.c.value).where(settings.c.name == JUDGE_NODE)).first()
        return dict(row.value) if row is not None else {}

    def set_judge_node_selector(self, selector: dict[str, str]) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(settings).where(settings.c.name == JUDGE_NODE))
            conn.execute(insert(settings).values(name=JUDGE_NODE, value=selector))

    def judge_keeper_state(self) -> dict[str, Any] | None:
        """What the leader's judge keeper last wrote (for `ctl guard judge status` on any server)."""
        with self._engine.connect() as conn:
            row = conn.execute(select(settings.c.value).where(settings.c.name == JUDGE_KEEPER)).first()
        return dict(row.value) if row is not None else None

    def set_judge_keeper_state(self, state: dict[str, Any], fence: Fence | None = None) -> None:
        """Fenced: a deposed leader cannot overwrite its successor's state."""
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            conn.execute(delete(settings).where(settings.c.name == JUDGE_KEEPER))
            conn.execute(insert(settings).values(name=JUDGE_KEEPER, value=state))

    def record_eviction(self, evicted: Evicted, fence: Fence | None = None) -> None:
        """Keep a swap's stop (the newest `EVICTIONS_KEPT`); fenced like the stop itself."""
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            row = conn.execute(select(settings.c.value).where(settings.c.name == EVICTIONS)).first()
            kept = [*(row.value if row is not None else []), evicted.model_dump(mode="json")]
            conn.execute(delete(settings).where(settings.c.name == EVICTIONS))
            conn.execute(insert(settings).values(name=EVICTIONS, value=kept[-EVICTIONS_KEPT:]))

    def evictions(self) -> list[Evicted]:
        """The kept evictions, oldest first."""
        with self._engine.connect() as conn:
            row = conn.execute(select(settings.c.value).where(settings.c.name == EVICTIONS)).first()
        return [Evicted.model_validate(e) for e in (row.value if row is not None else [])]

    def cache_epochs(self) -> dict[str, str]:
        """The response cache's epochs, by model or route name ("*" for all): part of every
        cache key, so a purge (a new epoch) leaves every answer kept before it out of reach in
        every process."""
        with self._engine.connect() as conn:
            row = conn.execute(select(settings.c.value).where(settings.c.name == CACHE_EPOCH)).first()
        return dict(row.value) if row is not None else {}

    def new_cache_epoch(self, name: str | None) -> None:
        """Start a new epoch for `name` (None: every name), random so two purges at once cannot
        agree on one, and move the revision: every server and worker takes it at its next
        refresh. A purge is a change like any other: the audit log has it."""
        with self._engine.begin() as conn:
            query = select(settings.c.value).where(settings.c.name == CACHE_EPOCH)
            row = conn.execute(query.with_for_update()).first()
            epochs = {} if name is None or row is None else dict(row.value)
            epochs[name or "*"] = secrets.token_hex(8)
            conn.execute(delete(settings).where(settings.c.name == CACHE_EPOCH))
            conn.execute(insert(settings).values(name=CACHE_EPOCH, value=epochs))
            record(conn, AuditKind.CACHE, "purge", name or "*", None, {"model": name})
            bump_revision(conn)

    def claim_secret(self, check: str) -> bool:
        """Record the install's key-secret check, or compare with the one recorded; False
        when this server's secret is not the install's."""
        return self._first(SECRET_CHECK, check) == check

    def _first(self, name: str, value: str) -> str:
        """The value stored under `name`, storing `value` there if none is: the first server
        to ask sets it, and one racing it gets the winner's."""
        with self._engine.begin() as conn:
            query = select(settings.c.value).where(settings.c.name == name)
            row = conn.execute(query).first()
            if row is not None:
                return str(row.value)
            try:
                with conn.begin_nested():
                    conn.execute(insert(settings).values(name=name, value=value))
            except IntegrityError:
                return str(conn.execute(query).one().value)
            return value
