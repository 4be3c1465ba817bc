"""The stdio bridge end to end: `python -m llmgw.api.mcp_bridge` in front of a real stdio MCP
server, called by the official MCP client over streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx2
import orjson
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from llmgw.core.engine_command import KEY_ENV
from llmgw.node.hardware import free_port
from llmgw.node.mcp_stdio import BRIDGE_ENV
from llmgw.node.process import spawn, terminate
from llmgw.node.supervisor import wait_healthy

SERVER = str(Path(__file__).parents[1] / "support" / "stdio_mcp.py")
KEY = "llmgw-engine-test-key"


class Bridge:
    def __init__(self, proc: asyncio.subprocess.Process, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def client(self, key: str | None = KEY) -> Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        http = httpx2.AsyncClient(headers=headers)
        return Client(streamable_http_client(self.url, http_client=http))


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[Bridge]:
    port, log = free_port(), tmp_path / "bridge.log"
    argv = [sys.executable, "-m", "llmgw.api.mcp_bridge", "--host", "127.0.0.1", "--port",
            str(port), "--log", str(log), "--", sys.executable, SERVER, str(tmp_path)]
    proc = await spawn(argv, log, {KEY_ENV: KEY, BRIDGE_ENV: orjson.dumps({"GREETING": "hi"}).decode()})
    try:
        code = await wait_healthy(proc, f"http://127.0.0.1:{port}/healthz", 60,
                                  asyncio.get_running_loop().time)
        assert code is None, log.read_text()
        yield Bridge(proc, f"http://127.0.0.1:{port}/mcp", log)
    finally:
        await terminate(proc, 10)


async def test_the_official_client_lists_and_calls_tools_through_the_bridge(bridge: Bridge) -> None:
    async with bridge.client() as client:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} >= {"echo", "wait", "env"}
        result = await client.call_tool("echo", {"text": "through the bridge"})
        assert not result.is_error
        assert result.content[0].text == "through the bridge"  # type: ignore[union-attr]
        # The server's own env reaches the child; the node's engine key does not.
        got = await client.call_tool("env", {"name": "GREETING"})
        assert got.content[0].text == "hi"  # type: ignore[union-attr]
        got = await client.call_tool("env", {"name": KEY_ENV})
        assert got.content[0].text == ""  # type: ignore[union-attr]


async def test_concurrent_clients_calls_overlap_and_each_gets_its_answer(bridge: Bridge) -> None:
    async with bridge.client() as a, bridge.client() as b:
        waiting = [asyncio.ensure_future(c.call_tool("wait", {"tag": f"{n}{i}"}))
                   for i in range(4) for n, c in (("a", a), ("b", b))]
        await a.call_tool("release", {})
        answers = await asyncio.gather(*waiting)
    assert sorted(r.content[0].text for r in answers) == sorted(  # type: ignore[union-attr]
        f"{n}{i}" for i in range(4) for n in "ab")


@pytest.mark.parametrize("key", [None, "llmgw-engine-another-nodes-key"])
async def test_a_caller_without_the_nodes_key_is_refused(bridge: Bridge, key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}}}
    async with aiohttp.ClientSession() as http, http.post(bridge.url, json=body,
                                                          headers=headers) as resp:
        assert resp.status == 401
        answer = await resp.json()
    assert answer["error"]["message"] == "unauthorized"
    assert "x" not in str(answer)


async def test_the_bridge_ends_as_its_child_did(bridge: Bridge) -> None:
    async with bridge.client() as client:
        pid = int((await client.call_tool("pid", {})).content[0].text)  # type: ignore[union-attr]
    os.kill(pid, signal.SIGKILL)
    code = await asyncio.wait_for(bridge.proc.wait(), 30)
    assert code == -signal.SIGKILL, bridge.log.read_text()
    assert "the MCP server's process ended (signal 9)" in bridge.log.read_text()


async def test_the_child_dies_with_its_bridge_even_when_the_bridge_is_killed(
    bridge: Bridge,
) -> None:
    async with bridge.client() as client:
        pid = int((await client.call_tool("pid", {})).content[0].text)  # type: ignore[union-attr]
    child = psutil.Process(pid)
    bridge.proc.kill()  # SIGKILL: the bridge cleans nothing up; the kernel's parent-death signal does
    await bridge.proc.wait()
    _, alive = await asyncio.to_thread(psutil.wait_procs, [child], 15)
    assert alive == []
