"""server-everything, the MCP project's own server, runs here as the tests' third-party MCP server
(tests/support/mcp_everything.py): the official `mcp` client lists its tools and calls `echo` over
streamable HTTP and over stdio."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from tests.support.mcp_everything import EverythingServer, running_everything


async def _list_and_echo(session: ClientSession) -> tuple[set[str], CallToolResult]:
    await session.initialize()
    tools = {tool.name for tool in (await session.list_tools()).tools}
    return tools, await session.call_tool("echo", {"message": "hello from llmgw's tests"})


def _assert_echoed(tools: set[str], result: CallToolResult) -> None:
    assert {"echo", "get-sum", "get-tiny-image"} <= tools
    assert not result.is_error
    assert [c.text for c in result.content if isinstance(c, TextContent)] == [
        "Echo: hello from llmgw's tests"]


async def test_over_streamable_http_it_lists_its_tools_and_echoes(
        everything_http: EverythingServer) -> None:
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(streamable_http_client(everything_http.url))
        session = await stack.enter_async_context(ClientSession(read, write))
        tools, result = await _list_and_echo(session)
    _assert_echoed(tools, result)


async def test_over_stdio_it_lists_its_tools_and_echoes(
        everything_stdio: StdioServerParameters) -> None:
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(everything_stdio))
        session = await stack.enter_async_context(ClientSession(read, write))
        tools, result = await _list_and_echo(session)
    _assert_echoed(tools, result)


def test_the_http_server_is_reaped_and_gone_after_teardown(tmp_path: Path) -> None:
    with running_everything(tmp_path) as server:
        url, proc = server.url, server.proc
        assert proc is not None
    assert proc.poll() is not None
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(url, timeout=2, trust_env=False)
