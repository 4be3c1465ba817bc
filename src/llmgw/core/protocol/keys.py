"""Keys, their usage and teams on the wire."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field

from llmgw.core.types import (
    TEAM_NAME_PATTERN,
    ApiKey,
    KeyInfo,
    KeyScope,
    Limits,
    Team,
    ToolGrants,
    UsageRow,
    UtcDatetime,
)


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
    tools: ToolGrants = Field(default_factory=ToolGrants, description="MCP tools it may use, as "
                              "patterns over SERVER/TOOL (`github`, `github/*`, `*/read_*`); a deny "
                              "wins. A minted key's allow stays within its minter's (empty: the "
                              "minter's) and takes its minter's denies; a team key's, within its "
                              "team's allow.")


class LiveCounts(BaseModel):
    """What a key (or team) has used of its limits right now, as admission counts it."""

    source: str = Field(description="redis (exact for the install) or this server (its own "
                                    "counts now, the other servers' at the last sync)")
    requests_this_minute: int = 0
    tokens_this_minute: int = 0
    in_flight: int = 0
    tokens_today: int = 0
    tokens_this_month: int = 0


class KeyOut(KeyInfo):
    """A key as lists show it: never its hash; `label` is how logs name it."""

    # Lenient, as answers are read by clients that may be older than the server.
    model_config = ConfigDict(frozen=True, extra="ignore")

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


class UsageRowOut(UsageRow):
    """One key's use of one model on one UTC day, with the key's name."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    key_name: str = Field(default="", description="The key's name: what people know a key by "
                          "(its id stays, as a revoked key's name may be taken again).")


class TeamRequest(BaseModel):
    """What `POST /admin/v1/teams` (and `PUT /admin/v1/teams/{name}`) take."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=TEAM_NAME_PATTERN)
    models: list[str] = Field(default_factory=list, description="Models (names or patterns) "
                              "the team's keys may call; empty: any their keys may.")
    limits: Limits = Field(default_factory=Limits, description="The team's own limits and "
                           "budgets, on top of each key's.")
    tools: ToolGrants = Field(default_factory=ToolGrants, description="MCP tools its keys may "
                              "use: a key without an allow of its own gets the team's, and a "
                              "key's own stays within it.")
    weight: float = Field(default=1.0, gt=0, le=1000, description="The team's share of a busy "
                          "model's slots against other teams' (1: an even share; a key outside "
                          "teams weighs 1).")
    note: str = Field(default="", max_length=1000)


class TeamOut(Team):
    """A team, with its keys (live ones) and today's and this month's tokens."""

    keys: int = 0
    tokens_today: int = 0
    tokens_this_month: int = 0
    # Filled in by `show` only.
    live: LiveCounts | None = None


class UsageQuery(BaseModel):
    """`GET /admin/v1/usage` filters."""

    key: str | None = Field(default=None, description="A key's id, name or prefix.")
    model: str | None = None
    since: str | None = Field(default=None, description="A date (YYYY-MM-DD) or an ISO time; "
                              "rows from the UTC day it falls on.", json_schema_extra={"format": "date"})
    team: str | None = Field(default=None, description="The keys of one team (a team admin: its "
                             "own only).")
