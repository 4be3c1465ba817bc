"""The admin API's wire models: what each `/admin/v1` endpoint takes and answers.

One module for the server, `ctl` and the console alike, so a field is named once. It imports
only pydantic and llmgw.core (ctl loads it without the web framework); domain types (Model,
Limits, Policy, ...) stay where they are and appear here as fields.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from llmgw.core import names
from llmgw.core.audit import AuditKind
from llmgw.core.demand import Evicted
from llmgw.core.guard import Direction, JudgeFormat, Outcome, Policy, Verdict
from llmgw.core.routes import RouteSpec
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import TEAM_NAME_PATTERN as TEAM_NAME_PATTERN
from llmgw.core.types import (
    ApiKey,
    Frozen,
    HubSource,
    KeyScope,
    Limits,
    LocalSource,
    Model,
    Node,
    Profile,
    Replica,
    Scaling,
    Team,
    UtcDatetime,
)
from llmgw.core.users import Grant, User

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
    # The team the key belongs to (a user key's only); a key minted by a team's key is the
    # team's whatever this says.
    team: str | None = Field(default=None, pattern=TEAM_NAME_PATTERN)
    # A user key of the team that may mint keys for it and see its keys and usage (admins only).
    team_admin: bool = False


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


# Responses. Field names are the wire's: ctl, the console and scripts read them.

T = TypeVar("T")


class DataList(BaseModel, Generic[T]):
    """A list answer: `{"data": [...]}`."""

    data: list[T]


class Removed(BaseModel):
    """A catalog model or guard policy that was removed."""

    name: str
    removed: bool = True


class NodeRemoved(BaseModel):
    """A node that was removed."""

    id: str
    removed: bool = True


class ModelOut(Model):
    """A catalog model with its on-demand state."""

    state: str = Field(description="cold, pending, loading on NODE, ready, idle 3m, failing: WHY "
                       "(engines keep dying), failed: WHY (given up on), failed or remote")


class FitOut(BaseModel):
    """One profile of a model on one node: does it fit, does it run there, would one more fit."""

    profile: str
    node_id: str
    fits: bool
    reason: str | None
    running: int
    one_more: bool
    one_more_reason: str | None


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


# How a node looks to an operator (control.node_admin.NodeState's values).
NodeStatus = Literal["ready", "cordoned", "draining", "lost"]


class NodeOut(Node):
    """A node as the API shows it: its row, plus status, heartbeat age and replica count."""

    status: NodeStatus
    heartbeat_age_s: float | None
    replica_count: int


class NodeDetailOut(NodeOut):
    """A node and the replicas placed on it."""

    replicas: list[Replica]


class JobOut(ServeJob):
    """A serve job, with the model it serves named at the top (read back, that field is
    ignored: it is the request's name)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def model(self) -> str:
        return self.request.name


class ServerOut(BaseModel):
    """One server of the cluster as `cluster status` lists it."""

    id: str
    url: str
    started_at: str
    seen_s_ago: float
    state: Literal["live", "gone"]
    leader: bool


class LeaseOut(BaseModel):
    """The leader's lease."""

    holder: str
    epoch: int
    renewed_at: str
    expires_at: str


class ClusterOut(BaseModel):
    """This server, the leader and its lease."""

    servers: list[ServerOut]
    server: str
    database: str
    leading: bool
    epoch: int | None
    last_reconcile_at: str | None
    lease: LeaseOut | None


class SwitchesOut(BaseModel):
    """The guard's switches."""

    guard_enabled: bool
    log_prompts: bool


class GuardOut(SwitchesOut):
    """The guard's switches and policies."""

    policies: list[Policy]


class JudgeStatusOut(BaseModel):
    """One judge: where it comes from, whether it serves, its keeper's state, its latency."""

    judge: str
    source: Literal["known", "enabled", "catalog only"]
    note: str
    format: JudgeFormat | None
    in_catalog: bool
    replicas_ready: int
    keeper: str
    keeper_server: str | None
    p50_ms: float | None
    p99_ms: float | None
    judgments: int
    # Admission now, summed over the live servers: judgments waiting for a slot, on a slot, and
    # the slots of its ready replicas.
    queue_depth: int = 0
    in_flight: int = 0
    slots: int = 0
    # The last five minutes of the verdict log: judgments, those shed, and the best rate it
    # sustained with p99 within budget (verdicts per second over 30 s; None: none did).
    judged_5m: int = 0
    shed_5m: int = 0
    sustained_per_s: float | None = None
    # Autoscaling: the replicas the judge keeper wants, the catalog entry's max, and why.
    replicas_wanted: int | None = None
    replicas_max: int | None = None
    scaling: str = ""


class VerdictOut(BaseModel):
    """One judgment on demand: the verdict and how long it took."""

    judge: str
    outcome: Outcome
    verdict: Verdict | None
    error: str | None
    latency_ms: float
    # When shed: how long until a judgment like it would likely be let in.
    retry_after_ms: float | None = None


class LiveCounts(BaseModel):
    """What a key (or team) has used of its limits right now, as admission counts it."""

    source: str = Field(description="redis (exact for the install) or this server (its own "
                                    "counts now, the other servers' at the last sync)")
    requests_this_minute: int = 0
    tokens_this_minute: int = 0
    in_flight: int = 0
    tokens_today: int = 0
    tokens_this_month: int = 0


class KeyOut(BaseModel):
    """A key as lists show it: never its hash; `label` is how logs name it."""

    id: str
    name: str
    prefix: str
    last4: str
    scope: KeyScope
    models: list[str] = Field(default_factory=list)
    expires_at: datetime | None = None
    revoked: bool = False
    by: str = ""
    created_at: datetime | None = None
    limits: Limits = Field(default_factory=Limits)
    note: str = ""
    minted_by: str | None = None
    node_id: str | None = None
    team: str | None = None
    team_admin: bool = False
    label: str
    # Filled in by `show` only (a list would cost a look-up per key).
    live: LiveCounts | None = None

    @classmethod
    def of(cls, key: ApiKey) -> Self:
        """`key` without its hash."""
        return cls(**key.model_dump(exclude={"hash"}), label=key.label)


class KeyCreated(KeyOut):
    """A key just created or rotated, with its secret: shown this once."""

    key: str


class KeyRevoked(KeyOut):
    """A revoked key and how many keys minted beneath it were revoked with it."""

    revoked_beneath: int


class UsageRowOut(BaseModel):
    """One key's use of one model on one UTC day."""

    key_id: str
    model: str
    day: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    blocked: int = 0


# Query parameters.


class TargetStatusOut(BaseModel):
    """One target of a route as this server sees it now."""

    model: str
    weight: int
    in_catalog: bool
    ready: int = Field(description="ready upstreams (replicas, or 1 for a remote provider)")
    in_flight: int = Field(description="requests in flight to it from this server")
    recent_failures: int = Field(description="failures counted towards its next cooldown")
    cooling_down_s: float = Field(description="seconds until its cooldown ends; 0: not cooling")


class RouteOut(RouteSpec):
    """A route with each target's state on the server that answered (cooldowns are each
    server's own)."""

    status: list[TargetStatusOut] = Field(default_factory=list)


class TeamRequest(BaseModel):
    """What `POST /admin/v1/teams` (and `PUT /admin/v1/teams/{name}`) take."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=TEAM_NAME_PATTERN)
    models: list[str] = Field(default_factory=list, description="Models (names or patterns) "
                              "the team's keys may call; empty: any their keys may.")
    limits: Limits = Field(default_factory=Limits, description="The team's own limits and "
                           "budgets, on top of each key's.")
    note: str = Field(default="", max_length=1000)


class TeamOut(Team):
    """A team, with its keys (live ones) and today's and this month's tokens."""

    keys: int = 0
    tokens_today: int = 0
    tokens_this_month: int = 0
    # Filled in by `show` only.
    live: LiveCounts | None = None


class ReplicaQuery(BaseModel):
    """`GET /admin/v1/replicas`: optionally one model's."""

    model: str | None = None


class NodeRemoveQuery(BaseModel):
    """`DELETE /admin/v1/nodes/{id}`."""

    force: bool = Field(default=False, description="Remove it even while it runs replicas.")


class UsageQuery(BaseModel):
    """`GET /admin/v1/usage` filters."""

    key: str | None = Field(default=None, description="A key's id, name or prefix.")
    model: str | None = None
    since: str | None = Field(default=None, description="A date (YYYY-MM-DD) or an ISO time; "
                              "rows from the UTC day it falls on.", json_schema_extra={"format": "date"})
    team: str | None = Field(default=None, description="The keys of one team (a team admin: its "
                             "own only).")


class VerdictQuery(BaseModel):
    """`GET /admin/v1/guard/verdicts` filters."""

    since: UtcDatetime | None = None
    policy: str | None = None
    judge: str | None = None
    outcome: Outcome | None = None
    request_id: str | None = Field(default=None, max_length=200,
                                   description="Only the verdicts on this request (its x-request-id).")
    limit: int = Field(default=100, json_schema_extra={"minimum": 1, "maximum": 10_000},
                       description="At most this many (clamped to 1..10000).")


class AuditQuery(BaseModel):
    """`GET /admin/v1/audit` filters."""

    since: UtcDatetime | None = None
    who: str | None = Field(default=None, max_length=256,
                            description="Only changes whose `by` contains this (a key's name).")
    kind: AuditKind | None = None
    target: str | None = Field(default=None, max_length=256, description="Only changes to this.")
    limit: int = Field(default=100, json_schema_extra={"minimum": 1, "maximum": 10_000},
                       description="At most this many, newest first (clamped to 1..10000).")


# The longest an agent's changes call is held open: well inside the agents' own request timeout
# and any proxy's idle timeout.
CHANGES_MAX_WAIT_S = 30.0


class ChangesQuery(BaseModel):
    """`GET /agent/v1/changes`: answer once the store is past `since`, or after `wait` seconds."""

    since: int = Field(default=-1, description="A revision; -1: answer at once.")
    wait: float = Field(default=0.0, ge=0, le=CHANGES_MAX_WAIT_S, description="Seconds to hold the call.")


class UserOut(BaseModel):
    """A person who signed in to the console through the identity provider."""

    id: str
    email: str | None = None
    name: str | None = None
    issuer: str
    subject: str
    role: str | None = None  # admin, operator, viewer or team-admin:TEAM; None: no access
    role_source: Literal["provider", "admin"] = "provider"
    created_at: datetime
    signed_in_at: datetime
    sessions: int = 0  # live console sessions

    @classmethod
    def of(cls, user: User, sessions: int = 0) -> UserOut:
        return cls(id=user.id, email=user.email, name=user.name, issuer=user.issuer,
                   subject=user.subject, role=str(user.grant) if user.grant else None,
                   role_source=user.role_source, created_at=user.created_at,
                   signed_in_at=user.signed_in_at, sessions=sessions)


class RoleRequest(BaseModel):
    """A role set by hand: `admin`, `operator`, `viewer`, `team-admin:TEAM`, or null (no
    access). The provider's groups no longer change it."""

    model_config = ConfigDict(extra="forbid")

    role: str | None

    @field_validator("role")
    @classmethod
    def _role(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                Grant.parse(v)
            except ValueError:
                raise ValueError(f"{v!r} is not a role: admin, operator, viewer or "
                                 "team-admin:TEAM") from None
        return v

    @property
    def grant(self) -> Grant | None:
        return Grant.parse(self.role) if self.role is not None else None


class SessionsEnded(BaseModel):
    """A user's console sessions an admin ended."""

    user: str
    ended: int
