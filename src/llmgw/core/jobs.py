"""Serve jobs: fetch a model's files, add it to the catalog, let the keeper place it."""

from __future__ import annotations

from datetime import datetime

from llmgw.core.protocol import JobState, ServeRequest
from llmgw.core.types import Frozen


class ServeJob(Frozen):
    """A serve job as stored and shown."""

    id: str
    request: ServeRequest
    state: JobState = JobState.QUEUED
    bytes_done: int = 0
    bytes_total: int = 0
    rate_bps: float = 0.0
    error: str | None = None
    # What the operator should know about a job that did not fail (a file that was not verified).
    warning: str | None = None
    estimate: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def model(self) -> str:
        return self.request.name
