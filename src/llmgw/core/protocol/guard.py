"""The guard on the wire: switches, judges, judgments and verdicts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from llmgw.core.guard import Direction, JudgeFormat, Outcome, Policy, Verdict
from llmgw.core.types import (
    UtcDatetime,
)


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
