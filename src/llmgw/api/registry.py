"""Every endpoint the server answers, in the order its routes are added, and the OpenAPI
document made from them."""

from __future__ import annotations

from typing import Any

from llmgw.api import agent, data_plane, mcp, openapi
from llmgw.api.admin import (
    audit,
    cache,
    guard,
    jobs,
    keys,
    models,
    nodes,
    routes,
    teams,
    users,
)
from llmgw.api.admin import mcp as mcp_admin
from llmgw.api.endpoints import Endpoint

ENDPOINTS: list[Endpoint[Any, Any]] = [
    # The cache's model route has a suffix: before the model routes' greedy name.
    *data_plane.ENDPOINTS, *cache.ENDPOINTS, *models.ENDPOINTS, *jobs.ENDPOINTS,
    *guard.ENDPOINTS, *keys.ENDPOINTS, *agent.ENDPOINTS, *nodes.ENDPOINTS, *routes.ENDPOINTS,
    *teams.ENDPOINTS, *audit.ENDPOINTS, *users.ENDPOINTS, *mcp.ENDPOINTS, *mcp_admin.ENDPOINTS,
]
OPENAPI = openapi.serve(ENDPOINTS)
ENDPOINTS.append(OPENAPI)


def spec() -> dict[str, Any]:
    """The OpenAPI document of every endpoint: a fresh copy, the caller's to change."""
    return openapi.document(ENDPOINTS)
