"""Serve jobs: fetch a model's files, add it to the catalog, let the keeper place it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field, field_validator

from llmgw.core import names
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import Frozen, HubSource, LocalSource, Profile, Scaling

# Used when a request names no profile: small enough for a laptop, big enough to be useful.
DEFAULT_CORES = 2


class JobState(StrEnum):
    QUEUED = "queued"
    FETCHING = "fetching"
    ADDING = "adding"
    RUNNING = "running"  # in the catalog; the keeper places its replicas
    FAILED = "failed"
    CANCELLED = "cancelled"
    GAVE_WAY = "gave_way"  # if_absent, and the name was taken meanwhile: that entry stays

    @property
    def finished(self) -> bool:
        return self in (JobState.RUNNING, JobState.FAILED, JobState.CANCELLED, JobState.GAVE_WAY)


class ServeRequest(Frozen):
    """What to serve and how; `profiles` empty means one CPU profile built from the rest."""

    name: str
    source: HubSource | LocalSource = Field(discriminator="kind")
    profiles: list[Profile] = Field(default_factory=list)
    cores: int = Field(default=DEFAULT_CORES, ge=0, le=1024)
    memory_gb: float | None = Field(default=None, gt=0)  # None: the GGUF-based estimate
    ctx_size: int = Field(default=DEFAULT_CTX_SIZE, ge=0, le=1 << 22)
    args: list[str] = Field(default_factory=list)
    scaling: Scaling = Field(default_factory=Scaling)
    guard: bool = False
    if_absent: bool = False
    by: str = ""

    # Checked here, not only when the model is added: a job must not fetch for a name the
    # catalog will refuse.
    _valid_name = field_validator("name")(names.check_model_name)


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
