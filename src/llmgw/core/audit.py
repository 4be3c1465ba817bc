"""The audit log's domain: who changes the install through the admin API, and one entry per
change.

Whoever serves an admin write says who is acting (`acting`) for the time it runs; every store
write that changes the install records an entry in its own transaction (`store.audit_repo.record`),
and records nothing when nobody is acting, so the control loops' own writes (a keeper fitting a
judge's profile, a node's report) stay out of it. The actor (and the client address
the change came from, `from_address`) rides a context variable, which worker threads
(`asyncio.to_thread`) inherit, so no repository signature has to carry it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class AuditKind(StrEnum):
    """What kind of thing a change was made to."""

    MODEL = "model"  # a catalog entry: added, removed, scaled
    POLICY = "policy"
    SWITCH = "switch"  # guard_enabled, log_prompts
    JUDGE = "judge"  # a judge enabled by repo
    KEY = "key"  # created, rotated, revoked (never its secret or hash)
    LIMITS = "limits"  # the install's default key limits
    NODE = "node"  # labelled, cordoned, drained, removed
    JOB = "job"  # a serve job started or cancelled
    ROUTE = "route"  # a public name in front of catalog models, with its fallbacks
    TEAM = "team"  # keys' team: its limits and budgets
    USER = "user"  # a person's role set by an admin, or the person removed
    SESSION = "session"  # a console sign-in, and its end (sign-out, ended by an admin, expiry)
    CACHE = "cache"  # the response cache purged, for one model or route or all ("*")
    MCP = "mcp"  # an upstream MCP server added, changed or removed (its credential: by reference)


class AuditEntry(BaseModel):
    """One change: when, who, what, and the thing before and after (None when it did not exist
    before, or no longer does). Secrets are never in `before` or `after`."""

    model_config = ConfigDict(frozen=True)

    id: int
    at: datetime
    by: str
    kind: AuditKind
    action: str  # e.g. "add", "scale", "remove", "set", "revoke"
    target: str  # the thing's name or id
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    address: str | None = None  # the client address the change came from, when it came over HTTP


_ACTOR: ContextVar[str | None] = ContextVar("llmgw_audit_actor", default=None)
_ADDRESS: ContextVar[str | None] = ContextVar("llmgw_audit_address", default=None)


def address() -> str | None:
    """The client address the running admin write came from; None when unknown."""
    return _ADDRESS.get()


@contextlib.contextmanager
def from_address(where: str | None) -> Iterator[None]:
    """Record `where` as the client address of the changes made in the block."""
    token = _ADDRESS.set(where)
    try:
        yield
    finally:
        _ADDRESS.reset(token)


def actor() -> str | None:
    """Who the running admin write is made by; None outside one."""
    return _ACTOR.get()


@contextlib.contextmanager
def acting(by: str) -> Iterator[None]:
    """Attribute the store writes made in the block (and the threads it starts) to `by`."""
    token = _ACTOR.set(by)
    try:
        yield
    finally:
        _ACTOR.reset(token)
