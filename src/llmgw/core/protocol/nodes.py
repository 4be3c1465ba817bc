"""Nodes, servers and the cluster on the wire, and what node agents ask for."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from llmgw.core.types import (
    Node,
    Replica,
)


class LabelRequest(BaseModel):
    """What `POST /admin/v1/nodes/{id}/labels` takes; the label rules are NodeAdmin's."""

    model_config = ConfigDict(extra="forbid")

    set: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)


class NodeRemoved(BaseModel):
    """A node that was removed."""

    id: str
    removed: bool = True


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


class NodeRemoveQuery(BaseModel):
    """`DELETE /admin/v1/nodes/{id}`."""

    force: bool = Field(default=False, description="Remove it even while it runs replicas.")


# The longest an agent's changes call is held open: well inside the agents' own request timeout
# and any proxy's idle timeout.
CHANGES_MAX_WAIT_S = 30.0


class ChangesQuery(BaseModel):
    """`GET /agent/v1/changes`: answer once the store is past `since`, or after `wait` seconds."""

    since: int = Field(default=-1, description="A revision; -1: answer at once.")
    wait: float = Field(default=0.0, ge=0, le=CHANGES_MAX_WAIT_S, description="Seconds to hold the call.")
