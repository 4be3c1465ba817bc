"""Where stdio MCP servers run: `mcp_runs`, one row per server, written from its node's reports."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, update

from llmgw.core.agent_wire import on_address
from llmgw.core.mcp import McpRun, McpRunState, McpServer, McpTransport
from llmgw.store.db import bump_revision, utc
from llmgw.store.mcp_repo import servers_in
from llmgw.store.schema import mcp_runs, nodes

logger = logging.getLogger(__name__)

_REPORTED = ("state", "endpoint", "pid", "restarts", "last_error")


def _to_run(row: Any) -> McpRun:
    return McpRun(server=row.server, node_id=row.node_id, state=McpRunState(row.state),
                  endpoint=row.endpoint, pid=row.pid, restarts=row.restarts,
                  last_error=row.last_error, updated_at=utc(row.updated_at))


def _stdio(conn: Connection) -> dict[str, McpServer]:
    return {s.name: s for s in servers_in(conn) if s.transport is McpTransport.STDIO}


class McpRunRepo:
    """Stdio MCP servers' runs: node agents report them, the gateway reads the ready ones."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def stdio_servers(self) -> list[McpServer]:
        """Every stdio server in the catalog, enabled or not, by name."""
        with self._engine.connect() as conn:
            return sorted(_stdio(conn).values(), key=lambda s: s.name)

    def list(self, node_id: str | None = None) -> list[McpRun]:
        """Every run (on `node_id` only, when given), by server."""
        query = select(mcp_runs).order_by(mcp_runs.c.server)
        if node_id is not None:
            query = query.where(mcp_runs.c.node_id == node_id)
        with self._engine.connect() as conn:
            return [_to_run(r) for r in conn.execute(query).all()]

    def ready(self, seen_since: datetime | None = None) -> dict[str, McpRun]:
        """What the gateway calls a stdio server at: server name → its run, for each enabled
        stdio server whose bridge is ready on the node it is meant to run on (and, with
        `seen_since`, whose node reported since then: a lost node's bridges are not called). A
        run's `endpoint` is the bridge's MCP URL (streamable HTTP, answers in plain JSON);
        every call to it carries the engine key of the run's node
        (`EngineKeys.headers(run.node_id)`)."""
        query = select(mcp_runs, nodes.c.heartbeat_at, nodes.c.address).join(
            nodes, nodes.c.id == mcp_runs.c.node_id).where(
            mcp_runs.c.state == McpRunState.READY.value, mcp_runs.c.endpoint.is_not(None))
        with self._engine.connect() as conn:
            servers = _stdio(conn)
            rows = conn.execute(query).all()
        out: dict[str, McpRun] = {}
        for row in rows:
            spec = servers.get(row.server)
            seen = utc(row.heartbeat_at)
            # On the node's address as it is now: a node that moved is not called where it was.
            if (spec is not None and spec.enabled and spec.node in (None, row.node_id)
                    and on_address(row.endpoint, row.address)
                    and (seen_since is None or (seen is not None and seen >= seen_since))):
                out[row.server] = _to_run(row)
        return out

    def report(self, run: McpRun, now: datetime) -> bool:
        """Write a node's report of its run (the server's row, whichever node had it before);
        True when anything changed, which bumps the revision (so every server's snapshot sees
        a bridge become ready, or fail, at once). A quiet report writes nothing."""
        values = {f: getattr(run, f) for f in _REPORTED}
        values["state"] = run.state.value
        with self._engine.begin() as conn:
            row = conn.execute(select(mcp_runs).where(mcp_runs.c.server == run.server)).first()
            if row is None:
                conn.execute(insert(mcp_runs).values(server=run.server, node_id=run.node_id,
                                                     updated_at=now, **values))
            elif row.node_id == run.node_id and all(getattr(row, f) == v
                                                    for f, v in values.items()):
                return False
            else:
                conn.execute(update(mcp_runs).where(mcp_runs.c.server == run.server).values(
                    node_id=run.node_id, updated_at=now, **values))
            bump_revision(conn)
        return True

    def forget(self, server: str, node_id: str) -> bool:
        """Drop `server`'s run if `node_id` has it (a node stopped its bridge); True if it did."""
        with self._engine.begin() as conn:
            gone = conn.execute(delete(mcp_runs).where(mcp_runs.c.server == server,
                                                       mcp_runs.c.node_id == node_id)).rowcount
            if gone:
                bump_revision(conn)
        return bool(gone)

    def reset(self, node_id: str, now: datetime) -> None:
        """A node starting again: its bridges of before died with it, so nothing may be sent to
        their ports (its agent starts them again)."""
        with self._engine.begin() as conn:
            if conn.execute(update(mcp_runs).where(mcp_runs.c.node_id == node_id).values(
                    state=McpRunState.STARTING.value, endpoint=None, pid=None,
                    updated_at=now)).rowcount:
                bump_revision(conn)
