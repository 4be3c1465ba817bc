"""MCP domain types: upstream MCP servers in the catalog, and which of their tools a key or team
may use.

A tool is named to clients as `SERVER__TOOL` (prompts likewise); permissions and policies match
patterns against `SERVER/TOOL` (`github/*`, `*/read_*`, `*`).
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from llmgw.core.types import Frozen, ToolGrants

__all__ = ["ToolGrants"]  # the grants are the keys' and teams' too (core.types)

# Lower-case, no underscores: `SERVER__TOOL` splits at the first `__`, and the whole name stays
# within the 64 characters model APIs allow for a tool's name.
MCP_SERVER_NAME = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$"
BUNDLE_NAME = r"^[a-z0-9](?:[a-z0-9-]{0,46}[a-z0-9])?$"
TOOL_SEPARATOR = "__"
MAX_RESULT_BYTES = 1024 * 1024


class McpTransport(StrEnum):
    """How llmgw reaches an upstream MCP server."""

    HTTP = "http"  # streamable HTTP, by URL
    SSE = "sse"  # the older HTTP+SSE transport, by URL
    STDIO = "stdio"  # a command run and supervised by a node agent


class McpCredential(Frozen):
    """Where an upstream's credential is read (on every server, when it calls), never the
    credential itself: neither the store nor the admin API ever holds it."""

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    file: str | None = Field(default=None, min_length=1, max_length=4096)
    header: str = Field(default="Authorization", pattern=r"^[A-Za-z0-9-]{1,64}$")
    # Put before the value ("Bearer" gives `Authorization: Bearer VALUE`); "" sends it as it is.
    scheme: str = Field(default="Bearer", pattern=r"^[A-Za-z0-9-]{0,32}$")

    @model_validator(mode="after")
    def _one_source(self) -> McpCredential:
        if (self.env is None) == (self.file is None):
            raise ValueError("a credential comes from exactly one of env or file")
        return self


class McpServer(Frozen):
    """An upstream MCP server in the catalog: remote by URL, or local by command over stdio."""

    name: str = Field(pattern=MCP_SERVER_NAME)
    transport: McpTransport = McpTransport.HTTP
    url: str | None = Field(default=None, max_length=2048)
    credential: McpCredential | None = None
    # stdio: the argv a node agent runs (no shell), its environment, and the node it runs on
    # (None: the server's own node).
    command: list[str] = Field(default_factory=list, max_length=256)
    env: dict[str, str] = Field(default_factory=dict)
    node: str | None = Field(default=None, max_length=128)
    # The named bundles (`/mcp/BUNDLE`) this server's tools are part of.
    bundles: list[str] = Field(default_factory=list, max_length=64)
    # Calls in flight to this server across every worker and server (None: unbounded).
    max_concurrency: int | None = Field(default=None, ge=1, le=100_000)
    cost_per_call: float | None = Field(default=None, ge=0)  # USD, counted in usage
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_result_bytes: int = Field(default=MAX_RESULT_BYTES, ge=1024, le=64 * 1024 * 1024)
    enabled: bool = True
    note: str = Field(default="", max_length=1000)
    by: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @field_validator("bundles")
    @classmethod
    def _bundle_names(cls, value: list[str]) -> list[str]:
        for b in value:
            if not re.fullmatch(BUNDLE_NAME, b):
                raise ValueError(f"bundle names are lower-case letters, digits and '-': {b!r}")
        return sorted(set(value))

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServer:
        if self.transport is McpTransport.STDIO:
            if not self.command:
                raise ValueError("a stdio server needs a command")
            if self.url is not None:
                raise ValueError("a stdio server has no url: a node agent runs its command")
        else:
            if self.url is None:
                raise ValueError(f"an {self.transport.value} server needs a url")
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("the url must be http:// or https:// with a host")
            if parts.username or parts.password:
                raise ValueError("put credentials in `credential` (env or file), not in the url")
            if self.command or self.env or self.node is not None:
                raise ValueError("command, env and node are for stdio servers")
        return self


def tool_name(server: str, tool: str) -> str:
    """The name a client sees for `server`'s `tool`."""
    return f"{server}{TOOL_SEPARATOR}{tool}"


def split_tool_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of a name a client sent, or None when it names no server."""
    server, sep, tool = name.partition(TOOL_SEPARATOR)
    return (server, tool) if sep and server and tool else None


class McpRunState(StrEnum):
    """A stdio server's process on its node (as a replica's)."""

    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


class McpRun(Frozen):
    """Where a stdio server runs and listens (a node agent's bridge in front of its stdio)."""

    server: str
    node_id: str
    state: McpRunState = McpRunState.PENDING
    endpoint: str | None = None  # http://HOST:PORT of the bridge
    pid: int | None = None
    restarts: int = 0
    last_error: str | None = None
    updated_at: datetime | None = None


class McpUsageRow(Frozen):
    """Tool calls per key, server, tool and day."""

    key_id: str
    server: str
    tool: str
    day: str  # YYYY-MM-DD, UTC
    calls: int = 0
    errors: int = 0
    blocked: int = 0
    cost: float = 0.0
