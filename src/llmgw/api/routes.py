"""Every endpoint the server answers, in the order its routes are added."""

from __future__ import annotations

from typing import Any

from llmgw.api import admin, agent, guard, jobs, keys, nodes
from llmgw.api.endpoints import Endpoint

ENDPOINTS: list[Endpoint[Any, Any]] = [
    *admin.ENDPOINTS, *jobs.ENDPOINTS, *guard.ENDPOINTS, *keys.ENDPOINTS, *agent.ENDPOINTS,
    *nodes.ENDPOINTS,
]
