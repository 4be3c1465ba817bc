"""A stdio MCP server on the server's own node: run by the embedded agent behind a bridge, its
run in the store where every server and worker reads it, called with the node's engine key."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import httpx2
import psutil
from aiohttp.test_utils import TestClient, TestServer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from llmgw.core.clock import SystemClock
from llmgw.core.engine_keys import EngineKeys
from llmgw.core.mcp import McpRun
from llmgw.core.types import KeyScope
from llmgw.node.agent import AgentConfig, NodeAgent
from llmgw.node.mcp_runs import McpRunConfig, McpRunner
from llmgw.node.remote import ServerLink
from llmgw.node.supervisor import Status
from llmgw.server.app import Loops, Server
from llmgw.store.store import Store
from tests.api.conftest import make_install
from tests.factories import KEY_SECRET, NOW, add_mcp_server, api_key, node, stdio_server

SERVER = str(Path(__file__).parents[1] / "support" / "stdio_mcp.py")


async def until(server: Server, check: Callable[[], object]) -> None:
    """Until `check()` holds, looking again at each change the server hears of."""
    async with asyncio.timeout(60):
        while not await asyncio.to_thread(check):
            await server.notifier.next_change(1.0)


def ready(store: Store) -> dict[str, McpRun]:
    return store.mcp_runs.ready()


async def test_the_embedded_node_runs_a_stdio_server_that_names_no_node(tmp_path: Path) -> None:
    install = make_install(tmp_path / "data", mcp_commands=[sys.executable])
    store = install.store
    add_mcp_server(store, stdio_server("tools", sys.executable, SERVER, str(tmp_path)))
    server = Server(install.data, install.settings, store, loops=Loops(agent_s=0.2))
    async with TestClient(TestServer(server.build_app())):
        await until(server, lambda: "tools" in ready(store))
        run = ready(store)["tools"]
        assert run.node_id == install.settings.node_id and run.endpoint is not None
        headers = EngineKeys(store.install.engine_key()).headers(run.node_id)
        http = httpx2.AsyncClient(headers=headers)
        async with Client(streamable_http_client(run.endpoint, http_client=http)) as client:
            result = await client.call_tool("echo", {"text": "any worker can call me"})
        assert result.content[0].text == "any worker can call me"  # type: ignore[union-attr]
        assert run.pid is not None
        bridge = psutil.Process(run.pid)
        child = bridge.children()
        assert len(child) == 1

        # Disabled: the agent stops its bridge, the bridge its server, and the run goes.
        add_mcp_server(store, stdio_server("tools", sys.executable, SERVER, str(tmp_path),
                                           enabled=False))
        await until(server, lambda: store.mcp_runs.list() == [])
        _, alive = psutil.wait_procs([bridge, *child], timeout=15)
        assert alive == []



async def test_a_remote_nodes_stdio_server_killed_is_restarted_with_its_crash_words_stored(
    tmp_path: Path,
) -> None:
    install = make_install(tmp_path / "data", embedded_node=False, key_secret=KEY_SECRET.hex())
    store = install.store
    token, key = api_key(scope=KeyScope.NODE, name="join")
    store.keys.create(key.model_copy(update={"created_at": NOW}))
    add_mcp_server(store, stdio_server("tools", sys.executable, SERVER, str(tmp_path),
                                       node="n1"))
    server = Server(install.data, install.settings, store)
    async with TestClient(TestServer(server.build_app())) as http:
        here = node("n1", address="127.0.0.1")
        link = ServerLink([str(http.make_url("")).rstrip("/")], token, lambda: here,
                          agent="agent-n1")
        await link.start()
        agent: NodeAgent

        async def report_mcp(name: str, status: Status) -> None:
            await link.report_mcp(name, status)
            agent.wake.set()

        mcp = McpRunner(McpRunConfig(host="127.0.0.1", log_dir=tmp_path / "node-logs",
                                     engine_key=lambda: link.engine_key,
                                     commands=frozenset({sys.executable}), backoff_base_s=0.05),
                        link.mcp_servers, report_mcp, link.forget_mcp, SystemClock())
        agent = NodeAgent(AgentConfig(node_id="n1", host="127.0.0.1", log_dir=tmp_path / "logs"),
                          link.assignments, link.report, link.forget, SystemClock(), mcp=mcp)
        task = asyncio.create_task(agent.run(0.2))
        try:
            await until(server, lambda: "tools" in ready(store))
            first = ready(store)["tools"]
            assert first.endpoint is not None and first.node_id == "n1"
            headers = EngineKeys(store.install.engine_key()).headers("n1")
            async with Client(streamable_http_client(
                    first.endpoint, http_client=httpx2.AsyncClient(headers=headers))) as client:
                pid = int((await client.call_tool("pid", {})).content[0].text)  # type: ignore[union-attr]
            os.kill(pid, signal.SIGKILL)
            await until(server, lambda: (r := ready(store).get("tools")) is not None
                        and r.restarts >= 1)
            (run,) = store.mcp_runs.list()
            assert run.pid != first.pid
            # Ready again, it says what it last died of.
            assert (run.last_error or "").startswith("MCP server tools was killed (SIGKILL)")
        finally:
            task.cancel()
            await asyncio.wait({task})
            await link.close()
