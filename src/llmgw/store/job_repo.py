"""Serve jobs in the database."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, insert, select, update

from llmgw.core.audit import AuditKind
from llmgw.core.errors import NotFound
from llmgw.core.protocol.models import JobState, ServeJob, ServeRequest
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.lease_repo import Fence
from llmgw.store.schema import serve_jobs

logger = logging.getLogger(__name__)

# A job that failed, was cancelled or gave way has an error; one that did not can only have a
# warning: both share the `error` column, told apart by the state.
_ERROR_STATES = (JobState.FAILED, JobState.CANCELLED, JobState.GAVE_WAY)
_FINISHED = [s.value for s in JobState if s.finished]


def _to_job(row: Any) -> ServeJob:
    state = JobState(row.state)
    return ServeJob(
        id=row.id,
        request=ServeRequest.model_validate(row.request),
        state=state,
        bytes_done=row.bytes_done,
        bytes_total=row.bytes_total,
        rate_bps=row.rate_bps,
        error=row.error if state in _ERROR_STATES else None,
        warning=None if state in _ERROR_STATES else row.error,
        estimate=row.estimate,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
    )


class JobRepo:
    """Serve jobs survive restarts: an unfinished one is resumed by the next server."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[ServeJob]:
        """Every job; one stored before a rule it breaks (a name the catalog now refuses) is
        logged and left out, so it cannot stop the job list, resuming or the judge keeper."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(serve_jobs).order_by(serve_jobs.c.created_at)).all()
        out = []
        for r in rows:
            try:
                out.append(_to_job(r))
            except ValidationError:
                logger.warning("serve job %s is not valid any more; left out", r.id)
        return out

    def get(self, job_id: str) -> ServeJob:
        with self._engine.connect() as conn:
            row = conn.execute(select(serve_jobs).where(serve_jobs.c.id == job_id)).one_or_none()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist", param="id")
        return _to_job(row)

    def create(self, job: ServeJob, now: datetime, fence: Fence | None = None) -> None:
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            conn.execute(
                insert(serve_jobs).values(
                    id=job.id,
                    model=job.model,
                    state=job.state.value,
                    request=job.request.model_dump(mode="json"),
                    bytes_done=job.bytes_done,
                    bytes_total=job.bytes_total,
                    rate_bps=job.rate_bps,
                    error=job.error or job.warning,
                    estimate=job.estimate,
                    created_at=now,
                    updated_at=now,
                )
            )
            record(conn, AuditKind.JOB, "start", job.id, None,
                   {"model": job.model, "request": job.request.model_dump(mode="json")}, now)
            # A job submitted to a follower must reach the leader, which runs every job.
            bump_revision(conn)

    def update(self, job_id: str, now: datetime, fence: Fence | None = None, **fields: Any) -> bool:
        """Change a job that has not finished (a finished job, cancelled from another server
        meanwhile among them, keeps its end); False when there was none to change."""
        if isinstance(fields.get("state"), JobState):
            fields["state"] = fields["state"].value
        if "warning" in fields:
            fields["error"] = fields.pop("warning")
        with self._engine.begin() as conn:
            if fence is not None:
                fence(conn)
            was = conn.execute(select(serve_jobs.c.state).where(serve_jobs.c.id == job_id)).scalar()
            changed = bool(conn.execute(
                update(serve_jobs)
                .where(serve_jobs.c.id == job_id, serve_jobs.c.state.notin_(_FINISHED))
                .values(**fields, updated_at=now)
            ).rowcount)
            if changed and fields.get("state") == JobState.CANCELLED.value:
                # The runner stopping a job an operator cancelled here (`ServeJobs.cancel`).
                record(conn, AuditKind.JOB, "cancel", job_id, {"state": was},
                       {"state": JobState.CANCELLED.value}, now)
            return changed

    def cancel(self, job_id: str, now: datetime, error: str) -> bool:
        """Mark a job that has not finished cancelled, from any server: the leader running it
        sees the change and stops it. False when it had finished already."""
        with self._engine.begin() as conn:
            was = conn.execute(select(serve_jobs.c.state).where(serve_jobs.c.id == job_id)).scalar()
            done = conn.execute(
                update(serve_jobs)
                .where(serve_jobs.c.id == job_id, serve_jobs.c.state.notin_(_FINISHED))
                .values(state=JobState.CANCELLED.value, error=error, updated_at=now)
            ).rowcount
            if done:
                record(conn, AuditKind.JOB, "cancel", job_id, {"state": was},
                       {"state": JobState.CANCELLED.value}, now)
                bump_revision(conn)
        return bool(done)
