"""Routes on the wire, with how this server sees each target."""

from __future__ import annotations

from pydantic import BaseModel, Field

from llmgw.core.routes import RouteSpec


class TargetStatusOut(BaseModel):
    """One target of a route as this server sees it now."""

    model: str
    weight: int
    in_catalog: bool
    ready: int = Field(description="ready upstreams (replicas, or 1 for a remote provider), "
                                   "less any that refused a connection in the last few seconds")
    in_flight: int = Field(description="requests in flight to it from this server")
    recent_failures: int = Field(description="failures counted towards its next cooldown")
    cooling_down_s: float = Field(description="seconds until its cooldown ends; 0: not cooling")


class RouteOut(RouteSpec):
    """A route with each target's state on the server that answered (cooldowns are each
    server's own)."""

    status: list[TargetStatusOut] = Field(default_factory=list)
