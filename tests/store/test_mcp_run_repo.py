"""Stdio MCP servers' runs in the store: what nodes report, and what the gateway reads."""

from __future__ import annotations

from datetime import timedelta

from llmgw.core.mcp import McpRun, McpRunState
from llmgw.store.store import Store
from tests.factories import NOW, add_mcp_server, node, stdio_server

LATER = NOW + timedelta(seconds=5)


def nodes(store: Store, *ids: str) -> None:
    for id_ in ids:
        store.nodes.upsert(node(id_, address="127.0.0.1"), NOW)


def ready(server: str, node: str, port: int = 9000) -> McpRun:
    return McpRun(server=server, node_id=node, state=McpRunState.READY,
                  endpoint=f"http://127.0.0.1:{port}/mcp", pid=42)


def test_the_gateway_reads_each_ready_run_and_a_state_change_moves_the_revision(
    any_store: Store,
) -> None:
    store = any_store
    nodes(store, "n1")
    add_mcp_server(store, stdio_server("tools", node="n1"))
    before = store.revision()
    assert store.mcp_runs.report(ready("tools", "n1"), NOW)
    assert store.revision() > before
    assert store.mcp_runs.ready()["tools"].endpoint == "http://127.0.0.1:9000/mcp"
    # The same report again writes nothing; a failure does, and the run is no longer ready.
    same = store.revision()
    assert not store.mcp_runs.report(ready("tools", "n1"), LATER)
    assert store.revision() == same
    failed = McpRun(server="tools", node_id="n1", state=McpRunState.FAILED, restarts=1,
                    last_error="MCP server tools was killed (SIGKILL)")
    assert store.mcp_runs.report(failed, LATER)
    assert store.revision() > same
    assert store.mcp_runs.ready() == {}
    assert store.mcp_runs.list()[0].last_error == "MCP server tools was killed (SIGKILL)"


def test_a_run_counts_only_for_an_enabled_server_on_the_node_it_names(any_store: Store) -> None:
    store = any_store
    nodes(store, "n1", "n2", "local")
    add_mcp_server(store, stdio_server("pinned", node="n1"))
    add_mcp_server(store, stdio_server("off", node="n1", enabled=False))
    add_mcp_server(store, stdio_server("anywhere"))
    for run in (ready("pinned", "n2"), ready("off", "n1"), ready("anywhere", "local"),
                ready("removed", "n1")):
        store.mcp_runs.report(run, NOW)
    assert set(store.mcp_runs.ready()) == {"anywhere"}


def test_a_run_on_a_node_not_seen_lately_is_not_called(any_store: Store) -> None:
    store = any_store
    nodes(store, "n1")
    add_mcp_server(store, stdio_server("tools", node="n1"))
    store.mcp_runs.report(ready("tools", "n1"), NOW)
    assert set(store.mcp_runs.ready(seen_since=NOW)) == {"tools"}
    assert store.mcp_runs.ready(seen_since=LATER) == {}


def test_forget_drops_only_the_nodes_own_run_and_reset_clears_its_endpoints(
    any_store: Store,
) -> None:
    store = any_store
    add_mcp_server(store, stdio_server("tools"))
    store.mcp_runs.report(ready("tools", "local"), NOW)
    assert not store.mcp_runs.forget("tools", "elsewhere")
    store.mcp_runs.reset("local", LATER)
    (run,) = store.mcp_runs.list(node_id="local")
    assert (run.state, run.endpoint, run.pid) == (McpRunState.STARTING, None, None)
    assert store.mcp_runs.forget("tools", "local")
    assert store.mcp_runs.list() == []


def test_a_run_off_its_nodes_address_as_it_is_now_is_not_called(any_store: Store) -> None:
    store = any_store
    nodes(store, "n1")
    add_mcp_server(store, stdio_server("tools", node="n1"))
    store.mcp_runs.report(ready("tools", "n1"), NOW)
    store.nodes.upsert(node("n1", address="10.0.0.7"), LATER)  # the node moved
    assert store.mcp_runs.ready() == {}
