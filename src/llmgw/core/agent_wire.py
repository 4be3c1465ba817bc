"""What node agents and servers say to each other on `/agent/v1/sync`."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field

from llmgw.core.mcp import MCP_SERVER_NAME, McpRunState, McpServer
from llmgw.core.types import Frozen, Model, Node, Replica, ReplicaState


class ReplicaReport(Frozen):
    """The latest a node's supervisor said about one replica."""

    id: str
    state: ReplicaState
    endpoint: str | None = Field(default=None, max_length=256)
    pid: int | None = None
    restarts: int = 0
    last_error: str | None = None


class SyncRequest(Frozen):
    """One agent round: the node (its heartbeat), what changed, and what it stopped."""

    node: Node
    # The agent's own id, kept in its data dir: servers refuse a second agent reporting as the
    # same node while the first one is alive, so it may never be empty.
    agent: str = Field(min_length=1, max_length=64)
    replicas: list[ReplicaReport] = Field(default_factory=list, max_length=10_000)
    # Replicas the server told it to stop, whose engines are gone: their rows can go.
    stopped: list[str] = Field(default_factory=list, max_length=10_000)


class Assigned(Frozen):
    """A replica placed on the node, with its catalog entry (None: only there to be stopped)."""

    replica: Replica
    model: Model | None


class Changes(Frozen):
    """The answer of `/agent/v1/changes`: the store's revision as the server sees it now."""

    revision: int


class SyncResponse(Frozen):
    """The node's replicas and the key its engines require (this node's own)."""

    assignments: list[Assigned]
    engine_key: str


class McpRunReport(Frozen):
    """The latest a node's agent said about the bridge of one stdio MCP server it runs."""

    server: str = Field(pattern=MCP_SERVER_NAME)
    state: McpRunState
    endpoint: str | None = Field(default=None, max_length=256)
    pid: int | None = None
    restarts: int = Field(default=0, ge=0)
    last_error: str | None = None


class McpSyncRequest(Frozen):
    """`/agent/v1/mcp`, after each sync: the node's stdio MCP servers' runs, and those it
    stopped (their rows can go). The node is the one the join token is bound to. A call of its
    own, so agents and servers of versions without MCP keep syncing with each other."""

    runs: list[McpRunReport] = Field(default_factory=list, max_length=10_000)
    stopped: list[str] = Field(default_factory=list, max_length=10_000)


class McpSyncResponse(Frozen):
    """The stdio MCP servers the node runs (enabled, with `node` naming it); their bridges
    require the node's engine key, as its engines do."""

    servers: list[McpServer]


def on_address(endpoint: str, address: str) -> bool:
    """Whether `endpoint` is an http(s) URL whose host is `address` (a node's own): the only
    place a node's replica may listen, and so the only place servers send traffic and the
    engine key to."""
    try:
        parts = urlsplit(endpoint)
        host, _ = parts.hostname, parts.port  # a malformed port raises ValueError
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and host is not None
            and host == address.strip("[]").lower())
