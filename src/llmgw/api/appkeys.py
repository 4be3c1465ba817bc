"""The services routes find on the application."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from llmgw.admin.cache import CacheAdmin
from llmgw.admin.keys import KeyAdmin
from llmgw.admin.mcp import McpAdmin
from llmgw.admin.people import People
from llmgw.admin.routes import RouteAdmin
from llmgw.admin.teams import TeamAdmin
from llmgw.control.agents import AgentService
from llmgw.control.catalog import CatalogService
from llmgw.control.mcp_agents import McpAgentService
from llmgw.control.node_admin import NodeAdmin
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core.audit import AuditEntry
from llmgw.core.protocol.audit import AuditQuery
from llmgw.core.protocol.guard import JudgeStatusOut
from llmgw.core.protocol.nodes import ClusterOut
from llmgw.gateway.mcp.service import McpService
from llmgw.gateway.metrics import Metrics, MetricsState
from llmgw.gateway.service import Gateway
from llmgw.guard.admin import GuardAdmin
from llmgw.guard.enforcement import Guard

GATEWAY = web.AppKey("gateway", Gateway)
MCP = web.AppKey("mcp", McpService)  # the `/mcp` endpoint's protocol (`gateway.mcp`)
CATALOG = web.AppKey("catalog", CatalogService)
JOBS = web.AppKey("jobs", ServeJobs)
GUARD = web.AppKey("guard", Guard)
GUARD_ADMIN = web.AppKey("guard_admin", GuardAdmin)
# Per-judge status for `ctl guard judge status`, composed by the server from several parts.
JudgeStatus = Callable[[], Awaitable[list[JudgeStatusOut]]]
JUDGE_STATUS: web.AppKey[JudgeStatus] = web.AppKey("judge_status")
KEYS = web.AppKey("keys", KeyAdmin)
# People signed in to the console, their sessions and roles; sign-in attempts.
PEOPLE = web.AppKey("people", People)
ROUTES = web.AppKey("routes", RouteAdmin)
TEAMS = web.AppKey("teams", TeamAdmin)
# Upstream MCP servers in the catalog (the admin API's side; the MCP gateway serves them).
MCP_ADMIN = web.AppKey("mcp_admin", McpAdmin)
CACHE = web.AppKey("cache", CacheAdmin)
NODES = web.AppKey("nodes", NodeAdmin)
METRICS = web.AppKey("metrics", Metrics)
# The server's other workers' metrics, summed into each scrape (absent with one worker).
PeerMetrics = Callable[[], Awaitable[list[MetricsState]]]
METRICS_PEERS: web.AppKey[PeerMetrics] = web.AppKey("metrics_peers")
# Whether `/metrics` answers without a key (`[server] metrics_public`).
METRICS_PUBLIC = web.AppKey("metrics_public", bool)
# This server's view of the cluster (leader, epoch, lease), composed in the server layer.
ClusterStatus = Callable[[], Awaitable[ClusterOut]]
CLUSTER: web.AppKey[ClusterStatus] = web.AppKey("cluster")
AGENTS = web.AppKey("agents", AgentService)
MCP_AGENTS = web.AppKey("mcp_agents", McpAgentService)
# The audit log, read with a query's filters (composed in the server layer over the store).
AuditReader = Callable[[AuditQuery], Awaitable[list[AuditEntry]]]
AUDIT: web.AppKey[AuditReader] = web.AppKey("audit")
# Waits until the server's view of the store is past a revision, or a number of seconds pass;
# returns the revision then (node agents hold one such call open to learn of placements at once).
NextRevision = Callable[[int, float], Awaitable[int]]
CHANGES: web.AppKey[NextRevision] = web.AppKey("changes")
