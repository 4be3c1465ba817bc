"""The admin API's wire models: what each `/admin/v1` endpoint takes and answers.

One module for the server, `ctl` and the console alike, so a field is named once. It imports
only pydantic and llmgw.core (ctl loads it without the web framework); domain types (Model,
Limits, Policy, ...) stay where they are and appear here as fields.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmgw.core import names
from llmgw.core.guard import Direction, JudgeFormat
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import Frozen, HubSource, KeyScope, Limits, LocalSource, Profile, Scaling, UtcDatetime

# Used when a serve request names no profile: small enough for a laptop, big enough to be useful.
DEFAULT_CORES = 2


# Requests.


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


class LabelRequest(BaseModel):
    """What `POST /admin/v1/nodes/{id}/labels` takes; the label rules are NodeAdmin's."""

    model_config = ConfigDict(extra="forbid")

    set: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)


class SwitchRequest(BaseModel):
    """What `POST /admin/v1/guard/switches` takes; a switch left out is unchanged."""

    model_config = ConfigDict(extra="forbid")
    guard_enabled: bool | None = None
    log_prompts: bool | None = None


class EnableJudge(BaseModel):
    """What `POST /admin/v1/guard/judges` takes: a judge model from the Hub."""

    model_config = ConfigDict(extra="forbid")
    repo: str
    file: str
    name: str | None = None
    format: JudgeFormat = JudgeFormat.QWEN3GUARD
    gpu: bool = False
    size_gb: float = Field(default=1.0, gt=0)


class JudgmentRequest(BaseModel):
    """What `POST /admin/v1/guard/judgments` takes: one text for one judge."""

    model_config = ConfigDict(extra="forbid")
    judge: str
    text: str
    direction: Direction = Direction.INPUT
    budget_ms: int = Field(default=5000, ge=1, le=600_000)


class KeyRequest(BaseModel):
    """What `POST /admin/v1/keys` takes."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    scope: KeyScope = KeyScope.USER
    models: list[str] = Field(default_factory=list)
    expires_at: UtcDatetime | None = None  # without a zone: UTC
    expires_in_days: float | None = Field(default=None, gt=0, le=36500)
    limits: Limits = Field(default_factory=Limits)
    note: str = Field(default="", max_length=1000)
    # A join token's node, when the admin names it (else its first report binds it).
    node_id: str | None = Field(default=None, min_length=1, max_length=128)


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
