"""The stdio multiplexer in front of a real stdio MCP server (the official SDK's)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from llmgw.core.errors import UpstreamTimeout, UpstreamUnreachable
from llmgw.node.mcp_stdio import StdioMcp

SERVER = str(Path(__file__).parents[1] / "support" / "stdio_mcp.py")


def mux_for(tmp_path: Path, env: dict[str, str] | None = None) -> StdioMcp:
    return StdioMcp([sys.executable, SERVER, str(tmp_path)], env or {}, tmp_path / "mcp.log")


def call(id_: object, tool: str, **arguments: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}


def text(answer: dict[str, object]) -> str:
    result = answer["result"]
    assert isinstance(result, dict)
    return str(result["content"][0]["text"])


async def test_the_handshake_is_made_once_and_tools_answer_with_the_callers_id(tmp_path: Path) -> None:
    mux = mux_for(tmp_path)
    await mux.start(30)
    try:
        assert mux.initialized is not None
        assert mux.initialized["serverInfo"]["name"] == "stdio-test"
        listed = await mux.request({"jsonrpc": "2.0", "id": "a", "method": "tools/list"}, 30)
        assert listed["id"] == "a"
        assert {t["name"] for t in listed["result"]["tools"]} >= {"echo", "wait", "pid"}
        assert text(await mux.request(call(7, "echo", text="hi"), 30)) == "hi"
    finally:
        await mux.close()


async def test_concurrent_callers_with_the_same_id_each_get_their_own_answer(tmp_path: Path) -> None:
    mux = mux_for(tmp_path)
    await mux.start(30)
    try:
        # Both wait inside the child until released: their answers come back out of order.
        waiting = [asyncio.ensure_future(mux.request(call(1, "wait", tag=f"t{i}"), 30))
                   for i in range(5)]
        await mux.request(call(1, "release"), 30)
        answers = await asyncio.gather(*waiting)
        assert [a["id"] for a in answers] == [1] * 5
        assert sorted(text(a) for a in answers) == [f"t{i}" for i in range(5)]
    finally:
        await mux.close()


async def test_the_child_sees_its_servers_env_and_none_of_the_nodes_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMGW_NODE_TOKEN", "llmgw-node-secret")
    mux = mux_for(tmp_path, {"GREETING": "hello"})
    await mux.start(30)
    try:
        assert text(await mux.request(call(1, "env", name="GREETING"), 30)) == "hello"
        assert text(await mux.request(call(2, "env", name="LLMGW_NODE_TOKEN"), 30)) == ""
    finally:
        await mux.close()


async def test_a_call_not_answered_in_time_is_a_timeout_and_a_dead_child_fails_waiters(
    tmp_path: Path,
) -> None:
    mux = mux_for(tmp_path)
    await mux.start(30)
    try:
        with pytest.raises(UpstreamTimeout):
            await mux.request(call(1, "wait", tag="late"), 0.2)
        waiting = asyncio.ensure_future(mux.request(call(2, "wait", tag="never"), 30))
        pid = int(text(await mux.request(call(3, "pid"), 30)))
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(UpstreamUnreachable):
            await waiting
        assert await mux.wait() == -signal.SIGKILL
        assert not mux.alive
    finally:
        await mux.close()


async def test_a_command_that_cannot_start_says_so(tmp_path: Path) -> None:
    mux = StdioMcp([str(tmp_path / "no-such-program")], {}, tmp_path / "mcp.log")
    with pytest.raises(UpstreamUnreachable, match="cannot start"):
        await mux.start(5)
