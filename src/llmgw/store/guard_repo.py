"""Guard policies, enabled judges, switches and the verdict log in the database."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from llmgw.core.audit import AuditKind
from llmgw.core.errors import NotFound
from llmgw.core.guard import Direction, JudgeSpec, Outcome, Policy, VerdictRecord
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import enabled_judges, meta, policies, verdicts
from llmgw.store.upsert import upsert

SWITCHES = ("guard_enabled", "log_prompts")


class GuardRepo:
    """Policies and switches bump the revision (the request path caches them); verdicts don't."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def policies(self) -> list[Policy]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(policies).order_by(policies.c.name)).all()
        return [
            Policy.model_validate({**r.spec, "name": r.name, "by": r.by, "updated_at": utc(r.updated_at)})
            for r in rows
        ]

    def set_policy(self, policy: Policy, by: str, now: datetime) -> None:
        """Create or replace a policy."""
        spec = policy.model_dump(mode="json", exclude={"name", "by", "updated_at"})
        with self._engine.begin() as conn:
            upsert(conn, policies, policy.name, spec, write="replace", kind=AuditKind.POLICY,
                   action="set", by=by, now=now)

    def remove_policy(self, name: str) -> None:
        with self._engine.begin() as conn:
            old = conn.execute(select(policies.c.spec).where(policies.c.name == name)).one_or_none()
            if not conn.execute(delete(policies).where(policies.c.name == name)).rowcount:
                raise NotFound(f"policy {name!r} does not exist", param="name")
            record(conn, AuditKind.POLICY, "remove", name, old.spec if old else None, None)
            bump_revision(conn)

    def switches(self) -> dict[str, bool]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(meta).where(meta.c.key.in_(SWITCHES))).all()
        return {r.key: bool(r.value) for r in rows}

    def set_switch(self, name: str, on: bool) -> None:
        assert name in SWITCHES
        with self._engine.begin() as conn:
            was = conn.execute(select(meta.c.value).where(meta.c.key == name)).scalar_one_or_none()
            conn.execute(update(meta).where(meta.c.key == name).values(value=int(on)))
            if was is None or bool(was) != on:  # setting a switch as it is changes nothing
                record(conn, AuditKind.SWITCH, "set", name,
                       None if was is None else {"on": bool(was)}, {"on": on})
            bump_revision(conn)

    def enabled_judges(self) -> list[JudgeSpec]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(enabled_judges).order_by(enabled_judges.c.name)).all()
        return [JudgeSpec.model_validate(r.spec) for r in rows]

    def enable_judge(self, spec: JudgeSpec, by: str, now: datetime) -> None:
        with self._engine.begin() as conn:
            upsert(conn, enabled_judges, spec.name, spec.model_dump(mode="json"), write="replace",
                   kind=AuditKind.JUDGE, action="enable", by=by, now=now)

    def add_verdicts(self, records: list[VerdictRecord]) -> None:
        """One batch from the verdict buffer."""
        if not records:
            return
        with self._engine.begin() as conn:
            conn.execute(insert(verdicts), [r.model_dump(mode="python") for r in records])

    def verdicts(
        self,
        *,
        since: datetime | None = None,
        policy: str | None = None,
        judge: str | None = None,
        outcome: str | None = None,
        request_id: str | None = None,
        limit: int = 100,
    ) -> list[VerdictRecord]:
        """Newest first, filtered."""
        query = select(verdicts).order_by(verdicts.c.id.desc()).limit(limit)
        if since is not None:
            query = query.where(verdicts.c.at >= since)
        if policy:
            query = query.where(verdicts.c.policy == policy)
        if judge:
            query = query.where(verdicts.c.judge == judge)
        if outcome:
            query = query.where(verdicts.c.outcome == outcome)
        if request_id:
            query = query.where(verdicts.c.request_id == request_id)
        with self._engine.connect() as conn:
            return [_to_record(r) for r in conn.execute(query).all()]


def _to_record(row: Any) -> VerdictRecord:
    return VerdictRecord(
        at=utc(row.at) or row.at,
        policy=row.policy,
        judge=row.judge,
        direction=Direction(row.direction),
        outcome=Outcome(row.outcome),
        categories=row.categories,
        let_through=row.let_through,
        latency_ms=row.latency_ms,
        model=row.model,
        key=row.key,
        request_id=row.request_id,
        text=row.text,
    )
