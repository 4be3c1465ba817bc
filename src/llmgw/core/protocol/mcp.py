"""Upstream MCP servers and their tool calls on the wire (`/admin/v1/mcp`).

A server's credential is only ever shown as where it is read (an env variable's or a file's
name, with its header and scheme): no value is stored, so none can be answered."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field

from llmgw.core import redact
from llmgw.core.mcp import McpCredential, McpServer, McpTransport, McpUsageRow


class McpServerPatch(BaseModel):
    """What `PATCH /admin/v1/mcp/servers/{name}` takes: the fields to change (null clears an
    optional one: `credential`, `node`, `max_concurrency`, `cost_per_call`); the rest stay."""

    model_config = ConfigDict(extra="forbid")

    transport: McpTransport | None = None
    url: str | None = Field(default=None, max_length=2048)
    credential: McpCredential | None = None
    command: list[str] | None = Field(default=None, max_length=256)
    env: dict[str, str] | None = None
    node: str | None = Field(default=None, max_length=128)
    bundles: list[str] | None = Field(default=None, max_length=64)
    max_concurrency: int | None = Field(default=None, ge=1, le=100_000)
    cost_per_call: float | None = Field(default=None, ge=0)
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    max_result_bytes: int | None = Field(default=None, ge=1024, le=64 * 1024 * 1024)
    enabled: bool | None = None
    note: str | None = Field(default=None, max_length=1000)


class McpServerRequest(McpServerPatch):
    """What `POST /admin/v1/mcp/servers` takes: a server by URL (`transport` http, the default,
    or sse) or by command (stdio, the default when a command and no url are given)."""

    name: str = Field(min_length=1, max_length=64)


class McpServerOut(McpServer):
    """An MCP server as the admin API shows it, with who may use its tools: the user keys and
    teams whose grants allow some of them (admin keys may use every server)."""

    # Lenient, as answers are read by clients that may be older than the server.
    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    keys: list[str] = Field(default_factory=list, description="Live user keys (by name) whose "
                            "grants allow some of its tools.")
    teams: list[str] = Field(default_factory=list, description="Teams whose grants allow some "
                             "of its tools.")

    @classmethod
    def of(cls, server: McpServer, keys: list[str] | None = None,
           teams: list[str] | None = None) -> Self:
        """`server` as shown: a URL's query values and the values of env variables named like a
        secret (`redact.env`) hidden; a credential is a reference already."""
        shown = server.model_dump()
        if server.url is not None:
            shown["url"] = redact.url(server.url)
        shown["env"] = redact.env(server.env)
        return cls(**shown, keys=keys or [], teams=teams or [])


class McpUsageQuery(BaseModel):
    """`GET /admin/v1/mcp/usage` filters."""

    since: str | None = Field(default=None, description="First day, YYYY-MM-DD (UTC); default: "
                              "the last 7 days.", json_schema_extra={"format": "date"})
    server: str | None = None


class McpUsageOut(McpUsageRow):
    """Tool calls of one key to one server's tool on one UTC day, with the key's name."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    key_name: str = ""


class McpToolOut(BaseModel):
    """One tool of an upstream server, as `GET /admin/v1/mcp/servers/{name}/tools` lists it."""

    model_config = ConfigDict(extra="ignore")
    name: str
    description: str | None = None
