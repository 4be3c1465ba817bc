"""Guard policies, enabled judges, switches and the verdict log in the database."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from llmgw.core.errors import NotFound
from llmgw.core.guard import Direction, JudgeSpec, Outcome, Policy, VerdictRecord
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import enabled_judges, meta, policies, verdicts

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
            conn.execute(delete(policies).where(policies.c.name == policy.name))
            conn.execute(insert(policies).values(name=policy.name, spec=spec, by=by, updated_at=now))
            bump_revision(conn)

    def remove_policy(self, name: str) -> None:
        with self._engine.begin() as conn:
            if not conn.execute(delete(policies).where(policies.c.name == name)).rowcount:
                raise NotFound(f"policy {name!r} does not exist", param="name")
            bump_revision(conn)

    def switches(self) -> dict[str, bool]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(meta).where(meta.c.key.in_(SWITCHES))).all()
        return {r.key: bool(r.value) for r in rows}

    def set_switch(self, name: str, on: bool) -> None:
        assert name in SWITCHES
        with self._engine.begin() as conn:
            conn.execute(update(meta).where(meta.c.key == name).values(value=int(on)))
            bump_revision(conn)

    def enabled_judges(self) -> list[JudgeSpec]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(enabled_judges).order_by(enabled_judges.c.name)).all()
        return [JudgeSpec.model_validate(r.spec) for r in rows]

    def enable_judge(self, spec: JudgeSpec, by: str, now: datetime) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(enabled_judges).where(enabled_judges.c.name == spec.name))
            conn.execute(insert(enabled_judges).values(
                name=spec.name, spec=spec.model_dump(mode="json"), by=by, created_at=now))
            bump_revision(conn)

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
