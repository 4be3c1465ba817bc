"""Upstream MCP servers in the store (SQLite and PostgreSQL): every write bumps the revision with
its audit entry, a name is taken once, and the usage rows read back per key, server, tool, day."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llmgw.core.audit import AuditKind, acting
from llmgw.core.errors import Conflict, NotFound
from llmgw.core.mcp import McpCredential, McpServer, McpTransport, McpUsageRow
from llmgw.store.schema import mcp_usage
from llmgw.store.store import Store

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
GITHUB = McpServer(name="github", url="https://mcp.example.com/mcp",
                   credential=McpCredential(env="GITHUB_PAT"), bundles=["dev"], max_concurrency=4)
FILES = McpServer(name="files", transport=McpTransport.STDIO, command=["npx", "server-fs", "/srv"],
                  env={"LOG": "debug", "GH_PAT": "pat-secret"}, node="node-a")


def test_servers_are_added_read_changed_and_removed_with_the_revision_and_audit(
        store: Store) -> None:
    before = store.revision()
    with acting("alice (sk-a…)"):
        added = store.mcp.add(GITHUB, "alice", NOW)
        store.mcp.add(FILES, "alice", NOW)
    assert store.revision() == before + 2
    assert added.by == "alice" and added.created_at == NOW
    assert added.model_dump(exclude={"by", "created_at", "updated_at"}) == \
        GITHUB.model_dump(exclude={"by", "created_at", "updated_at"})
    assert [s.name for s in store.mcp.list()] == ["files", "github"]
    assert store.mcp.get("files").command == ["npx", "server-fs", "/srv"]

    with acting("bob (sk-b…)"):
        changed = store.mcp.update(GITHUB.model_copy(update={"enabled": False}), "bob", NOW)
        store.mcp.remove("files")
    assert not changed.enabled and changed.by == "bob"
    assert store.revision() == before + 4
    assert [s.name for s in store.mcp.list()] == ["github"]
    entries = store.audit.entries(kind=AuditKind.MCP)
    assert [(e.action, e.target) for e in entries] == [
        ("remove", "files"), ("set", "github"), ("add", "files"), ("add", "github")]
    # The credential is a reference: the audit entry says where it is read, and nothing more.
    assert entries[-1].after is not None and entries[-1].after["credential"]["env"] == "GITHUB_PAT"
    # A stdio server's secret-named env value is in its spec (the node needs it), not the audit.
    assert store.mcp.get("github") and "pat-secret" not in repr(entries)
    assert entries[0].before is not None and entries[0].before["env"]["GH_PAT"] == "***"


def test_a_name_is_taken_once_and_an_unknown_one_is_not_found(store: Store) -> None:
    store.mcp.add(GITHUB, "alice", NOW)
    revision = store.revision()
    with pytest.raises(Conflict, match="already exists"):
        store.mcp.add(GITHUB, "alice", NOW)
    with pytest.raises(NotFound):
        store.mcp.get("nope")
    with pytest.raises(NotFound):
        store.mcp.update(FILES, "alice", NOW)
    with pytest.raises(NotFound):
        store.mcp.remove("nope")
    assert store.revision() == revision  # nothing failed half-way


def test_usage_reads_back_per_key_server_tool_and_day(store: Store) -> None:
    rows = [McpUsageRow(key_id="key_a", server="github", tool="search", day="2026-12-01", calls=3),
            McpUsageRow(key_id="key_b", server="github", tool="search", day="2026-12-04",
                        calls=2, errors=1, blocked=1, cost=0.02),
            McpUsageRow(key_id="key_a", server="files", tool="read", day="2026-12-05", calls=7)]
    with store.engine.begin() as conn:
        conn.execute(mcp_usage.insert(), [r.model_dump() for r in rows])
    assert store.mcp.usage() == [rows[0], rows[1], rows[2]]
    assert store.mcp.usage(since="2026-12-04") == [rows[1], rows[2]]
    assert store.mcp.usage(server="github", key_id="key_b") == [rows[1]]
