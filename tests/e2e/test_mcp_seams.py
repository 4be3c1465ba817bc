"""Where `/mcp` meets the rest of llmgw, on a real server (its default workers) set up as a user
would, with `ctl`: a stdio server run by the embedded node and called through `/mcp`, a key's
tool limit under a burst, a guard policy on a tool, and usage counted per key, server and tool."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.mcp_everything import everything_command, mcp_node
from tests.support.mcp_upstream import INJECTED, RunningUpstream
from tests.support.server_process import LlmgwServer, wait_for

STDIO_SERVER = Path(__file__).resolve().parents[1] / "support" / "stdio_mcp.py"


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory,
            mcp_upstreams: dict[str, RunningUpstream]) -> Iterator[LlmgwServer]:
    """A bare install whose own node may run this Python as a stdio MCP server, with a remote
    server `up` and a stdio server `local` added through ctl."""
    tmp = tmp_path_factory.mktemp("seams")
    server = LlmgwServer.init(tmp / "data", "--no-demo", "--no-guard")
    server.allow("mcp_commands", [sys.executable, str(mcp_node())])
    with server.running():
        server.ctl("mcp", "add", "up", "--url", mcp_upstreams["http-json"].url)
        server.ctl("mcp", "add", "local", "--", sys.executable, str(STDIO_SERVER), str(tmp))
        # A third-party server (MCP's own server-everything, on Node.js) over stdio.
        server.ctl("mcp", "add", "everything", "--", *everything_command("stdio"))
        yield server


def user_key(server: LlmgwServer, *flags: str) -> str:
    name = f"agent-{uuid.uuid4().hex[:6]}"
    return str(json.loads(server.ctl("--json", "key", "create", name, *flags).stdout)["key"])


async def rpc(client: httpx2.AsyncClient, url: str, key: str, method: str,
              params: dict[str, Any], session: str | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    return await client.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1,
                                                         "method": method, "params": params})


async def session_of(client: httpx2.AsyncClient, url: str, key: str) -> str:
    answer = await rpc(client, url, key, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "seams", "version": "1"}})
    assert answer.status_code == 200, answer.text
    return answer.headers["Mcp-Session-Id"]


def texts(answer: httpx2.Response) -> str:
    return "\n".join(c.get("text", "") for c in answer.json()["result"]["content"])


async def test_a_stdio_server_run_by_the_embedded_node_answers_through_mcp(
        install: LlmgwServer) -> None:
    key = user_key(install, "--tools-allow", "local/echo")
    url = install.url + "/mcp"
    async with httpx2.AsyncClient(timeout=30) as client:
        sid = await session_of(client, url, key)

        async def listed() -> list[str]:
            answer = await rpc(client, url, key, "tools/list", {}, sid)
            return [t["name"] for t in answer.json()["result"]["tools"]]

        # Listed once the node's bridge is ready (it starts the program after the add).
        for _ in range(300):
            if await listed():
                break
            await asyncio.sleep(0.1)
        assert await listed() == ["local__echo"]  # granted local/echo only
        answer = await rpc(client, url, key, "tools/call",
                           {"name": "local__echo", "arguments": {"text": "from a node"}}, sid)
        assert texts(answer) == "from a node"


async def test_a_third_party_stdio_server_answers_through_mcp(install: LlmgwServer) -> None:
    key = user_key(install, "--tools-allow", "everything/echo")
    url = install.url + "/mcp"
    async with httpx2.AsyncClient(timeout=30) as client:
        sid = await session_of(client, url, key)

        async def echoed() -> httpx2.Response:
            return await rpc(client, url, key, "tools/call",
                             {"name": "everything__echo", "arguments": {"message": "hi"}}, sid)

        for _ in range(300):  # once the node's bridge has started it
            answer = await echoed()
            if not answer.json()["result"].get("isError"):
                break
            await asyncio.sleep(0.1)
        assert texts(answer) == "Echo: hi"


async def test_a_burst_past_a_keys_tool_calls_per_minute_is_refused_beyond_it(
        install: LlmgwServer) -> None:
    key = user_key(install, "--tools-allow", "up", "--tool-calls-per-minute", "3")
    url = install.url + "/mcp"
    async with httpx2.AsyncClient(timeout=30) as client:
        sid = await session_of(client, url, key)
        answers = await asyncio.gather(*(
            rpc(client, url, key, "tools/call",
                {"name": "up__echo", "arguments": {"text": str(i)}}, sid) for i in range(8)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 3 + [429] * 5, statuses
    refused = next(a for a in answers if a.status_code == 429)
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["message"]  # JSON-RPC's shape, in words


async def test_a_guard_policy_on_a_tool_withholds_its_result_when_its_judge_cannot_answer(
        install: LlmgwServer) -> None:
    # No judge runs in this install: the policy's judge cannot answer, and closed withholds.
    install.ctl("guard", "policy", "set", "tools-closed", "--judges", "qwen3guard-0.6b",
                "--tools", "up/inject", "--no-input", "--output", "--budget-ms", "500",
                "--on-failure", "closed")
    try:
        key = user_key(install, "--tools-allow", "up")
        url = install.url + "/mcp"
        async with httpx2.AsyncClient(timeout=30) as client:
            sid = await session_of(client, url, key)
            answer = await rpc(client, url, key, "tools/call",
                               {"name": "up__inject", "arguments": {}}, sid)
            plain = await rpc(client, url, key, "tools/call",
                              {"name": "up__echo", "arguments": {"text": "not covered"}}, sid)
        result = answer.json()["result"]
        assert result["isError"] is True
        assert "withheld" in texts(answer) and INJECTED not in answer.text
        assert texts(plain) == "not covered"  # a tool the policy does not name is not judged
    finally:
        install.ctl("guard", "policy", "remove", "tools-closed")


async def test_tool_calls_are_counted_per_key_server_and_tool(install: LlmgwServer) -> None:
    key = user_key(install, "--tools-allow", "up")
    url = install.url + "/mcp"
    async with httpx2.AsyncClient(timeout=30) as client:
        sid = await session_of(client, url, key)
        for text in ("a", "b"):
            await rpc(client, url, key, "tools/call",
                      {"name": "up__echo", "arguments": {"text": text}}, sid)
    key_id = next(k["id"] for k in install.get("/admin/v1/keys")["data"]
                  if k["prefix"] and key.startswith(k["prefix"]))

    def counted() -> int:
        rows = install.get("/admin/v1/mcp/usage?server=up")["data"]
        return sum(r["calls"] for r in rows if r["key_id"] == key_id and r["tool"] == "echo")

    wait_for("the calls in usage", lambda: counted() == 2, 30)
