"""A node's stdio MCP servers: the plan, and the runner supervising real bridges in front of a
real stdio MCP server (the official SDK's)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from llmgw.core.clock import SystemClock
from llmgw.core.mcp import McpServer, McpTransport
from llmgw.core.types import ReplicaState
from llmgw.engines.crashes import GAVE_UP
from llmgw.node.mcp_runs import McpRunConfig, McpRunner, fingerprint, plan_runs
from llmgw.node.supervisor import Status
from tests.node.conftest import Reports

SERVER = str(Path(__file__).parents[1] / "support" / "stdio_mcp.py")
KEY = "llmgw-engine-node-key"


def stdio(name: str, *command: str, **fields: object) -> McpServer:
    return McpServer(name=name, transport=McpTransport.STDIO, command=list(command), **fields)  # type: ignore[arg-type]


def test_the_plan_starts_what_is_new_restarts_what_changed_and_stops_what_left() -> None:
    a, b, c = stdio("a", "x"), stdio("b", "x"), stdio("c", "x")
    b2 = stdio("b", "x", env={"K": "v"})
    running = {"a": fingerprint(a), "b": fingerprint(b), "gone": "f"}
    plan = plan_runs([a, b2, c, stdio("off", "x", enabled=False)], running, {})
    assert [s.name for s in plan.start] == ["b", "c"]
    assert plan.restart == ["b"]
    assert plan.stop == ["gone"]


def test_a_server_given_up_on_stays_down_until_it_changes_and_is_forgotten_once_gone() -> None:
    a = stdio("a", "x")
    assert plan_runs([a], {}, {"a": fingerprint(a)}).start == []
    assert [s.name for s in plan_runs([stdio("a", "y")], {}, {"a": fingerprint(a)}).start] == ["a"]
    assert plan_runs([], {}, {"a": fingerprint(a)}).stop == ["a"]


class Node:
    """A runner over a list of servers the test changes, with what it reported and forgot."""

    def __init__(self, tmp_path: Path, commands: frozenset[str]) -> None:
        self.servers: list[McpServer] = []
        self.reports = Reports()
        self.forgotten: list[str] = []

        async def servers() -> list[McpServer]:
            return list(self.servers)

        async def forget(name: str) -> None:
            self.forgotten.append(name)

        self.runner = McpRunner(
            McpRunConfig(host="127.0.0.1", log_dir=tmp_path / "logs", engine_key=lambda: KEY,
                         commands=commands, start_timeout_s=30, backoff_base_s=0.05,
                         max_failures=2),
            servers, self.reports, forget, SystemClock())

    async def ready(self, after: int = 0) -> Status:
        return await self.reports.until(
            lambda s: s.state == ReplicaState.READY and s.restarts >= after, "ready")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path, frozenset({sys.executable}))
    try:
        yield n
    finally:
        await n.runner.stop_all()


def client(endpoint: str, key: str = KEY) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(endpoint, http_client=http))


async def test_a_stdio_server_runs_behind_a_bridge_on_the_nodes_address(
    node: Node, tmp_path: Path
) -> None:
    node.servers = [stdio("tools", sys.executable, SERVER, str(tmp_path))]
    await node.runner.reconcile()
    ready = await node.ready()
    assert ready.endpoint is not None and ready.endpoint.startswith("http://127.0.0.1:")
    assert ready.endpoint.endswith("/mcp")
    async with client(ready.endpoint) as c:
        result = await c.call_tool("echo", {"text": "from the node"})
    assert result.content[0].text == "from the node"  # type: ignore[union-attr]
    # Its stderr and the bridge's lines are in the run's log.
    assert (tmp_path / "logs" / "mcp-tools.log").exists()


async def test_a_killed_server_is_restarted_and_says_what_it_died_of(
    node: Node, tmp_path: Path
) -> None:
    node.servers = [stdio("tools", sys.executable, SERVER, str(tmp_path))]
    await node.runner.reconcile()
    first = await node.ready()
    assert first.endpoint is not None
    async with client(first.endpoint) as c:
        pid = int((await c.call_tool("pid", {})).content[0].text)  # type: ignore[union-attr]
    os.kill(pid, signal.SIGKILL)
    failed = await node.reports.until(lambda s: s.state == ReplicaState.FAILED, "failed")
    assert failed.last_error is not None
    # What happened, without a model engine's remedies (no profile to give more memory).
    assert failed.last_error.startswith("MCP server tools was killed (SIGKILL), most likely by "
                                        "the kernel's out-of-memory killer: its log's last lines "
                                        "say why")
    again = await node.ready(after=1)
    assert again.endpoint is not None and again.pid != first.pid
    async with client(again.endpoint) as c:
        assert (await c.call_tool("echo", {"text": "back"})).content[0].text == "back"  # type: ignore[union-attr]


async def test_a_server_that_keeps_failing_is_given_up_on_with_its_words(
    node: Node, tmp_path: Path
) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nsys.stderr.write('no credentials for the tool\\n')\nsys.exit(3)\n")
    node.servers = [stdio("broken", sys.executable, str(crash))]
    await node.runner.reconcile()
    gave_up = await node.reports.until(
        lambda s: (s.last_error or "").startswith(GAVE_UP), "given up")
    assert "no credentials for the tool" in (gave_up.last_error or "")
    await node.runner.reconcile()
    assert node.runner.running == set()  # not started again until the server changes


async def test_a_program_the_node_does_not_allow_never_runs(tmp_path: Path) -> None:
    n = Node(tmp_path, frozenset({"npx"}))
    n.servers = [stdio("tools", sys.executable, SERVER, str(tmp_path))]
    await n.runner.reconcile()
    failed = await n.reports.until(lambda s: s.state == ReplicaState.FAILED, "refused")
    assert "does not run MCP servers with program" in (failed.last_error or "")
    assert n.runner.running == set()


async def test_a_removed_server_is_stopped_and_forgotten(node: Node, tmp_path: Path) -> None:
    node.servers = [stdio("tools", sys.executable, SERVER, str(tmp_path))]
    await node.runner.reconcile()
    ready = await node.ready()
    node.servers = []
    await node.runner.reconcile()
    assert node.runner.running == set() and node.forgotten == ["tools"]
    assert ready.pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(ready.pid, 0)
