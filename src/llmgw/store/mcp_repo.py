"""Upstream MCP servers in the database (`mcp_servers`: name, spec JSON, by, times)."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, select

from llmgw.core.errors import NotFound
from llmgw.core.mcp import McpServer
from llmgw.store.db import utc
from llmgw.store.schema import mcp_servers

logger = logging.getLogger(__name__)


def _to_server(row: Any) -> McpServer:
    return McpServer.model_validate({**row.spec, "name": row.name, "by": row.by,
                                     "created_at": utc(row.created_at),
                                     "updated_at": utc(row.updated_at)})


class McpRepo:
    """Reads upstream MCP servers."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[McpServer]:
        """Every server, by name; one that no longer validates is logged and left out."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(mcp_servers).order_by(mcp_servers.c.name)).all()
        out = []
        for r in rows:
            try:
                out.append(_to_server(r))
            except ValidationError:
                logger.exception("MCP server %r is not valid; left out until fixed or removed",
                                 r.name)
        return out

    def get(self, name: str) -> McpServer:
        """The server `name`; NotFound when there is none."""
        with self._engine.connect() as conn:
            row = conn.execute(select(mcp_servers).where(mcp_servers.c.name == name)).one_or_none()
        if row is None:
            raise NotFound(f"MCP server {name!r} does not exist", param="name")
        return _to_server(row)
