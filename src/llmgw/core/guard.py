"""Guard domain types: policies, judges, verdicts and the verdict log's records."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field, model_validator

from llmgw.core.types import Frozen

DEFAULT_BUDGET_MS = 5000


class JudgeFormat(StrEnum):
    """The prompt and verdict format a judge model was trained on."""

    QWEN3GUARD = "qwen3guard"
    LLAMA_GUARD = "llama-guard"


class Direction(StrEnum):
    INPUT = "input"  # the user's prompt, judged before (or while) the upstream answers
    OUTPUT = "output"  # the model's answer, judged before the client sees it


class Controversial(StrEnum):
    STRICT = "strict"  # Controversial counts as unsafe
    LOOSE = "loose"  # Controversial counts as safe


class OnFailure(StrEnum):
    CLOSED = "closed"  # a judge that cannot answer in time refuses the request
    OPEN = "open"  # ... lets it through (and the verdict log says so)


class InputMode(StrEnum):
    BEFORE = "before"  # judge, then call the upstream
    PARALLEL = "parallel"  # call the upstream at once, hold its answer until the verdict


class JudgeSpec(Frozen):
    """A guard model llmgw knows by name: where to fetch it and how to talk to it."""

    name: str
    repo: str
    file: str
    size_gb: float
    gpu: bool = False
    format: JudgeFormat = JudgeFormat.QWEN3GUARD
    # Llama Guard 3 1B knows S1–S13, 8B adds S14; Qwen3Guard's list is fixed by its format.
    categories: int = 14
    note: str = ""


class Policy(Frozen):
    """Which traffic is judged, by which judges, and what happens when they cannot answer."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    models: list[str] = Field(default_factory=lambda: ["*"])  # names or fnmatch patterns
    keys: list[str] = Field(default_factory=lambda: ["*"])  # key names or patterns
    # MCP tools covered, as patterns over `SERVER/TOOL`: input judges a call's arguments, output
    # its result. Empty: the policy covers no tool calls.
    tools: list[str] = Field(default_factory=list, max_length=256)
    input: bool = True
    output: bool = False
    input_mode: InputMode = InputMode.BEFORE
    judges: list[str] = Field(min_length=1)
    block_categories: list[str] = Field(default_factory=list)  # empty: every category blocks
    controversial: Controversial = Controversial.STRICT
    budget_ms: int = Field(default=DEFAULT_BUDGET_MS, ge=1, le=600_000)
    on_failure: OnFailure = OnFailure.CLOSED
    # Streams: how many characters of output are held back and judged at a time.
    stream_window_chars: int = Field(default=400, ge=1, le=1_000_000)
    enabled: bool = True
    by: str = ""
    updated_at: datetime | None = None

    @model_validator(mode="after")
    def _checks_something(self) -> Policy:
        if not (self.input or self.output):
            raise ValueError("a policy must check input, output, or both")
        return self


class Safety(StrEnum):
    SAFE = "safe"
    UNSAFE = "unsafe"
    CONTROVERSIAL = "controversial"


class Verdict(Frozen):
    """What a judge said, parsed strictly from its output."""

    safety: Safety
    categories: list[str] = Field(default_factory=list)
    refusal: bool | None = None  # Qwen3Guard response moderation only


class Outcome(StrEnum):
    SAFE = "safe"
    UNSAFE = "unsafe"
    FAILED_TIMEOUT = "failed_timeout"
    FAILED_UNPARSEABLE = "failed_unparseable"
    FAILED_ERROR = "failed_error"  # the judge could not be reached or answered an error
    # Not sent: the judge could not have answered within what was left of the budget.
    FAILED_SHED = "failed_shed"


class JudgeLoad(Frozen):
    """One judge's admission on one server (or the sum over servers): its slots and queue now,
    and counters since the server started."""

    slots: int = Field(default=0, ge=0)  # slots of the judge's ready replicas
    in_flight: int = Field(default=0, ge=0)
    queued: int = Field(default=0, ge=0)  # waiting in the gateway for a free slot
    waited: int = Field(default=0, ge=0)  # judgments that had to wait for a slot
    shed: int = Field(default=0, ge=0)  # judgments failed as failed_shed
    served: int = Field(default=0, ge=0)  # judgments a judge answered

    def plus(self, other: JudgeLoad) -> JudgeLoad:
        """Two processes' or servers' loads on the same judge: the judgments summed, the slots
        not. Every process admits to the same replicas, whose slots are their `--parallel`:
        summed, a server with two workers showed a two-slot replica as four."""
        summed = {k: getattr(self, k) + getattr(other, k) for k in JudgeLoad.model_fields}
        return JudgeLoad(**{**summed, "slots": max(self.slots, other.slots)})


class VerdictRecord(Frozen):
    """One judgment in the verdict log."""

    at: datetime
    policy: str
    judge: str
    direction: Direction
    outcome: Outcome
    categories: list[str] = Field(default_factory=list)
    # A failure that `on_failure: open` let through.
    let_through: bool = False
    latency_ms: float
    model: str = ""
    key: str = ""  # the key's visible label, never the key
    request_id: str = ""
    text: str | None = None  # only when the operator turned prompt logging on
