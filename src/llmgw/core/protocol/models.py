"""The catalog and serving on the wire: models, their resources, scaling and serve jobs."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from llmgw.core import names
from llmgw.core.demand import Evicted
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import (
    Fit,
    Frozen,
    HubSource,
    LocalSource,
    Model,
    Node,
    Profile,
    Replica,
    Scaling,
)

# Used when a serve request names no profile: small enough for a laptop, big enough to be useful.
DEFAULT_CORES = 2


class ScaleRequest(BaseModel):
    """What `POST /admin/v1/models/{name}/scale` takes."""

    model_config = ConfigDict(extra="forbid")
    min: int = Field(ge=0, le=64, description="Replicas kept ready; 0: the model is on demand "
                     "(started by its first request).")
    max: int | None = Field(default=None, ge=0, le=64, description=(
        "Upper bound for autoscaling on load. Left out: unchanged if it was above min, else min "
        "(at least 1)."))
    idle_s: float | None = Field(default=None, gt=0, le=30 * 86400, description=(
        "Replicas above min that served nothing for this many seconds are stopped; null: they "
        "stay. Unchanged when left out."))


class ServeRequest(Frozen):
    """What `POST /admin/v1/jobs` takes: what to serve and how; `profiles` empty means one CPU
    profile built from the rest."""

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


class JobState(StrEnum):
    """Where a serve job is; here beside ServeRequest because job answers carry it."""

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


class ModelOut(Model):
    """A catalog model with its on-demand state."""

    state: str = Field(description="cold, pending, loading on NODE, ready, idle 3m, failing: WHY "
                       "(engines keep dying), failed: WHY (given up on), failed or remote")


class FitOut(Fit):
    """One profile of a model on one node: does it fit, does it run there, would one more fit."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class EstimateOut(BaseModel):
    """A profile's memory estimate from the GGUF header, by part (GiB)."""

    total_gb: float
    parts: dict[str, float]
    describe: str


class ResourcesOut(BaseModel):
    """What `ctl model resources` shows: placement per node, replicas, nodes, estimates, swaps."""

    model: Model
    placement: list[FitOut]
    replicas: list[Replica]
    nodes: list[Node]
    estimates: dict[str, EstimateOut]
    evictions: list[Evicted]


class JobOut(ServeJob):
    """A serve job, with the model it serves named at the top (read back, that field is
    ignored: it is the request's name)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def model(self) -> str:
        return self.request.name


class ReplicaQuery(BaseModel):
    """`GET /admin/v1/replicas`: optionally one model's."""

    model: str | None = None
