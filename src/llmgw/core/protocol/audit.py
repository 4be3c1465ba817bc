"""The audit log's query on the wire."""

from __future__ import annotations

from pydantic import BaseModel, Field

from llmgw.core.audit import AuditKind
from llmgw.core.types import (
    UtcDatetime,
)


class AuditQuery(BaseModel):
    """`GET /admin/v1/audit` filters."""

    since: UtcDatetime | None = None
    who: str | None = Field(default=None, max_length=256,
                            description="Only changes whose `by` contains this (a key's name).")
    kind: AuditKind | None = None
    target: str | None = Field(default=None, max_length=256, description="Only changes to this.")
    limit: int = Field(default=100, json_schema_extra={"minimum": 1, "maximum": 10_000},
                       description="At most this many, newest first (clamped to 1..10000).")
