"""Routes: a public model name in front of one or more catalog models, with how a request picks
among them and when it moves on to the next.

A route is configuration an admin writes; clients only name it. Nothing a client sends can add a
target or a fallback to its request.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from llmgw.core import names
from llmgw.core.cache import CacheSpec
from llmgw.core.types import Frozen

MAX_TARGETS = 16


class Strategy(StrEnum):
    """How a route orders its targets for one request."""

    PRIORITY = "priority"  # in the order listed: the first healthy one
    WEIGHTED = "weighted"  # at random, in proportion to the weights
    LEAST_BUSY = "least-busy"  # the one with the fewest requests in flight on this server


class FailOn(StrEnum):
    """An upstream failure a route may move on from (to the next target, or a retry)."""

    CONNECT = "connect"  # could not connect (or the target has no ready replica)
    SERVER_ERROR = "5xx"  # answered 500-599
    TIMEOUT = "timeout"  # did not answer within the upstream timeout
    RATE_LIMITED = "429"  # the upstream is rate limiting
    CONTEXT_LENGTH = "context-length"  # the prompt does not fit the target's context


class Target(Frozen):
    """One catalog model behind a route."""

    model: str
    weight: int = Field(default=1, ge=0, le=1_000_000)

    _valid_model = field_validator("model")(names.check_model_name)


class Cooldown(Frozen):
    """A target that failed `failures` times within `window_s` is skipped for `cooldown_s`."""

    failures: int = Field(default=3, ge=1, le=1000)
    window_s: float = Field(default=60.0, gt=0, le=86400)
    cooldown_s: float = Field(default=30.0, gt=0, le=86400)


class Fallback(Frozen):
    """When a request moves on to the route's next target, and how many targets it may try."""

    on: list[FailOn] = Field(default_factory=lambda: [FailOn.CONNECT, FailOn.SERVER_ERROR,
                                                      FailOn.TIMEOUT, FailOn.RATE_LIMITED])
    # Targets one request may try in all (None: every target once).
    attempts: int | None = Field(default=None, ge=1, le=MAX_TARGETS)
    cooldown: Cooldown = Field(default_factory=Cooldown)


class Retry(Frozen):
    """Retries on the same target: for connect errors, and 429/503 from remote providers.

    The wait doubles from `backoff_ms` up to `max_backoff_ms`; a provider's Retry-After is
    honoured when it is longer. No retry starts that could not end within the request's timeout."""

    attempts: int = Field(default=0, ge=0, le=10)  # retries after the first try
    backoff_ms: int = Field(default=200, ge=1, le=60_000)
    max_backoff_ms: int = Field(default=5_000, ge=1, le=600_000)


class RouteSpec(Frozen):
    """A route as stored and as the admin API takes it."""

    name: str
    targets: list[Target] = Field(min_length=1, max_length=MAX_TARGETS)
    strategy: Strategy = Strategy.PRIORITY
    fallback: Fallback = Field(default_factory=Fallback)
    retry: Retry = Field(default_factory=Retry)
    # Its own response cache setting; None: the install's `[cache]`.
    cache: CacheSpec | None = None
    by: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None

    _valid_name = field_validator("name")(names.check_model_name)

    @model_validator(mode="after")
    def _consistent(self) -> RouteSpec:
        seen = [t.model for t in self.targets]
        if len(set(seen)) != len(seen):
            raise ValueError("a route names each target once")
        if self.name in seen:
            raise ValueError("a route cannot be its own target")
        if self.strategy == Strategy.WEIGHTED and not any(t.weight for t in self.targets):
            raise ValueError("a weighted route needs a target with a weight above 0")
        return self
