"""Upstream MCP servers in the database, and the tool calls counted against them.

Every write bumps the revision and records its audit entry in its own transaction, so every
server's MCP gateway follows the catalog and a write that fails leaves no trace. The spec JSON
holds everything but the name, `by` and the times; a credential is only ever a reference (an env
variable's or a file's name), never its value.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Engine, delete, select

from llmgw.core import redact
from llmgw.core.audit import AuditKind
from llmgw.core.errors import Conflict, NotFound
from llmgw.core.mcp import McpServer, McpUsageRow
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import mcp_servers, mcp_usage
from llmgw.store.upsert import upsert

logger = logging.getLogger(__name__)

# What the row's own columns hold; the spec is everything else.
_COLUMNS = {"name", "by", "created_at", "updated_at"}


def _to_server(row: Any) -> McpServer:
    return McpServer.model_validate({"name": row.name, **row.spec, "by": row.by,
                                     "created_at": utc(row.created_at),
                                     "updated_at": utc(row.updated_at)})


def servers_in(conn: Connection) -> list[McpServer]:
    """Every MCP server by name, read in `conn`; one that no longer validates is logged and left
    out."""
    out = []
    for r in conn.execute(select(mcp_servers).order_by(mcp_servers.c.name)).all():
        try:
            out.append(_to_server(r))
        except ValidationError:
            logger.exception("MCP server %r is not valid; left out until fixed or removed", r.name)
    return out


def spec(server: McpServer) -> dict[str, Any]:
    """What the store keeps of `server` as its spec (unset optional fields left out)."""
    return {k: v for k, v in server.model_dump(mode="json", exclude=_COLUMNS).items()
            if v is not None}


def audited(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A spec as the audit log keeps it: a stdio server's secret-named env values hidden
    (`record` drops only fields named like secrets, and a URL's credentials and query)."""
    return {**spec, "env": redact.env(spec["env"])} if spec.get("env") else dict(spec)


def _missing(name: str) -> NotFound:
    return NotFound(f"MCP server {name!r} does not exist", param="name")


class McpRepo:
    """Reads and writes the MCP servers of the catalog; reads their usage."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[McpServer]:
        """Every MCP server by name; one that no longer validates is logged and left out."""
        with self._engine.connect() as conn:
            return servers_in(conn)

    def get(self, name: str) -> McpServer:
        """One MCP server (NotFound when there is none of that name)."""
        with self._engine.connect() as conn:
            row = conn.execute(select(mcp_servers)
                               .where(mcp_servers.c.name == name)).one_or_none()
        if row is None:
            raise _missing(name)
        return _to_server(row)

    def add(self, server: McpServer, by: str, now: datetime) -> McpServer:
        """Add a server (Conflict when the name is taken)."""
        with self._engine.begin() as conn:
            upsert(conn, mcp_servers, server.name, spec(server), write="insert",
                   kind=AuditKind.MCP, action="add", by=by, now=now, audited=audited,
                   taken=Conflict(f"MCP server {server.name!r} already exists", param="name"))
        return self.get(server.name)

    def update(self, server: McpServer, by: str, now: datetime) -> McpServer:
        """Change a server that exists (NotFound otherwise) to `server`."""
        with self._engine.begin() as conn:
            upsert(conn, mcp_servers, server.name, spec(server), write="update",
                   kind=AuditKind.MCP, action="set", by=by, now=now, audited=audited,
                   missing=_missing(server.name))
        return self.get(server.name)

    def remove(self, name: str) -> None:
        """Remove a server (NotFound when there is none); its usage rows stay, as history."""
        with self._engine.begin() as conn:
            old = conn.execute(select(mcp_servers.c.spec)
                               .where(mcp_servers.c.name == name)).one_or_none()
            if not conn.execute(delete(mcp_servers).where(mcp_servers.c.name == name)).rowcount:
                raise _missing(name)
            record(conn, AuditKind.MCP, "remove", name, audited(old.spec) if old else None, None)
            bump_revision(conn)

    def usage(self, since: str | None = None, server: str | None = None,
              key_id: str | None = None) -> builtins.list[McpUsageRow]:
        """Tool calls per key, server, tool and day (from `since`, a YYYY-MM-DD day, on), by
        day, server, tool and key."""
        t = mcp_usage.c
        query = select(mcp_usage).order_by(t.day, t.server, t.tool, t.key_id)
        if since:
            query = query.where(t.day >= since)
        if server:
            query = query.where(t.server == server)
        if key_id:
            query = query.where(t.key_id == key_id)
        with self._engine.connect() as conn:
            return [McpUsageRow(**r._mapping) for r in conn.execute(query).all()]
