"""The `/mcp` protocol in process (`McpService`), against the SDK's real upstream servers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llmgw.core.errors import RateLimited
from llmgw.core.mcp import McpCredential, McpServer, McpTransport
from llmgw.core.types import ApiKey
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.mcp.call import ToolCall, ToolNext, ToolResult
from llmgw.gateway.mcp.catalog import RETRY_S, McpCatalog
from llmgw.gateway.mcp.service import Asked, McpService
from llmgw.gateway.mcp.upstream import McpClient
from llmgw.gateway.transport import Transport
from tests.factories import KEY_SECRET, admin_key
from tests.support.mcp_upstream import TOKEN, RunningUpstream, upstream
from tests.support.server_process import free_port

ADMIN = admin_key()[1]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def transport() -> AsyncIterator[Transport]:
    t = Transport(timeout_s=60)
    await t.start()
    yield t
    await t.close()


def service(transport: Transport, servers: list[McpServer], clock: Clock | None = None,
            key: ApiKey = ADMIN) -> McpService:
    catalog = McpCatalog(McpClient(transport), lambda: {s.name: s for s in servers},
                         monotonic=clock or Clock())
    keys = KeyCache(KEY_SECRET, [key])
    return McpService(catalog, lambda: keys, KEY_SECRET)


async def ask(svc: McpService, method: str, params: dict[str, Any] | None = None,
              key: ApiKey = ADMIN) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        msg["params"] = params
    answered = await svc.answer(Asked(key, None, msg))
    assert answered.body is not None
    return answered.body


async def test_initialize_speaks_the_clients_version_or_the_latest(transport: Transport) -> None:
    svc = service(transport, [])
    for asked, spoken in (("2024-11-05", "2024-11-05"), ("2025-06-18", "2025-06-18"),
                          ("2026-07-28", "2025-11-25"), (None, "2025-11-25")):
        answered = await svc.answer(Asked(ADMIN, None, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": asked, "capabilities": {}}}))
        assert answered.body is not None and answered.session_id is not None
        assert answered.body["result"]["protocolVersion"] == spoken
        session = svc.session(ADMIN, None, answered.session_id)
        assert session is not None and session.version == spoken
    assert (await ask(svc, "ping"))["result"] == {}
    assert (await ask(svc, "server/discover"))["error"]["code"] == -32601
    note = await svc.answer(Asked(ADMIN, None, {"jsonrpc": "2.0", "method": "notifications/initialized"}))
    assert note.body is None


async def test_a_failing_server_is_left_out_and_logged_once(
        transport: Transport, mcp_upstreams: dict[str, RunningUpstream],
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    good = McpServer(name="good", url=mcp_upstreams["http-json"].url)
    bad = McpServer(name="bad", url=mcp_upstreams["html"].url)
    svc = service(transport, [good, bad], clock)
    with caplog.at_level(logging.WARNING, logger="llmgw.gateway.mcp.catalog"):
        for _ in range(3):
            tools = {t["name"] for t in (await ask(svc, "tools/list"))["result"]["tools"]}
            assert "good__echo" in tools and not any(t.startswith("bad__") for t in tools)
            clock.now += RETRY_S + 1  # past the retry: the bad server is asked again
    warned = [r for r in caplog.records if "bad" in r.getMessage()]
    assert len(warned) == 1


async def test_a_session_the_upstream_forgot_is_opened_again(transport: Transport) -> None:
    port = free_port()
    server = McpServer(name="restarts", url=f"http://127.0.0.1:{port}/mcp")
    svc = service(transport, [server])
    with upstream("http", port=port):
        said = await ask(svc, "tools/call", {"name": "restarts__echo", "arguments": {"text": "1"}})
        assert said["result"]["content"][0]["text"] == "1"
    with upstream("http", port=port):  # a new process: it knows none of the old sessions
        said = await ask(svc, "tools/call", {"name": "restarts__echo", "arguments": {"text": "2"}})
        assert said["result"]["content"][0]["text"] == "2"


async def test_a_stdio_server_without_a_run_is_unavailable(transport: Transport) -> None:
    stdio = McpServer(name="local", transport=McpTransport.STDIO, command=["some-mcp-server"])
    svc = service(transport, [stdio])
    assert (await ask(svc, "tools/list"))["result"]["tools"] == []
    said = await ask(svc, "tools/call", {"name": "local__anything", "arguments": {}})
    assert said["result"]["isError"] is True
    assert said["result"]["content"][0]["text"] == "MCP server local is not available now"


async def test_a_missing_credential_is_named_never_shown(
        transport: Transport, mcp_upstreams: dict[str, RunningUpstream],
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = McpServer(name="up", url=mcp_upstreams["http"].url,
                       credential=McpCredential(env="MCP_SERVICE_TEST_TOKEN"))
    svc = service(transport, [server])
    said = await ask(svc, "tools/call", {"name": "up__echo", "arguments": {"text": "x"}})
    assert said["result"]["isError"] is True
    assert "MCP_SERVICE_TEST_TOKEN" in said["result"]["content"][0]["text"]
    monkeypatch.setenv("MCP_SERVICE_TEST_TOKEN", TOKEN)  # read at call time: no restart
    said = await ask(svc, "tools/call", {"name": "up__echo", "arguments": {"text": "x"}})
    assert said["result"]["content"][0]["text"] == "x"
    assert TOKEN not in str(said)


async def test_an_sse_server_is_listed_and_called(transport: Transport,
                                                  no_task_outlives_its_test: None) -> None:
    with upstream("sse") as sse:
        server = McpServer(name="old", transport=McpTransport.SSE, url=sse.url, timeout_s=3,
                           max_result_bytes=50_000)
        svc = service(transport, [server])
        try:
            tools = {t["name"] for t in (await ask(svc, "tools/list"))["result"]["tools"]}
            assert {"old__echo", "old__hang"} <= tools
            said = await ask(svc, "tools/call", {"name": "old__echo", "arguments": {"text": "sse"}})
            assert said["result"]["content"][0]["text"] == "sse"
            hung = await ask(svc, "tools/call", {"name": "old__hang", "arguments": {}})
            assert "timed out" in hung["result"]["content"][0]["text"]
            huge = await ask(svc, "tools/call", {"name": "old__huge", "arguments": {"size": 60_000}})
            assert "larger than 50000 bytes" in huge["result"]["content"][0]["text"]
            said = await ask(svc, "tools/call", {"name": "old__echo", "arguments": {"text": "on"}})
            assert said["result"]["content"][0]["text"] == "on"
        finally:
            await svc.close()


async def test_a_stage_answers_in_place_of_the_upstream_and_a_limit_is_raised(
        transport: Transport, mcp_upstreams: dict[str, RunningUpstream]) -> None:
    server = McpServer(name="js", url=mcp_upstreams["http-json"].url)
    seen: list[str] = []

    async def withhold(call: ToolCall, nxt: ToolNext) -> ToolResult:
        seen.append(call.target)
        if call.tool == "inject":
            return ToolResult.error("withheld")
        if call.tool == "huge":
            raise RateLimited("tool calls per minute", retry_after_s=7)
        return await nxt(call)

    catalog = McpCatalog(McpClient(transport), lambda: {"js": server})
    keys = KeyCache(KEY_SECRET, [ADMIN])
    svc = McpService(catalog, lambda: keys, KEY_SECRET, stages=[withhold])
    echoed = await ask(svc, "tools/call", {"name": "js__echo", "arguments": {"text": "e"}})
    assert echoed["result"]["content"][0]["text"] == "e"
    withheld = await ask(svc, "tools/call", {"name": "js__inject", "arguments": {}})
    assert withheld["result"] == {"content": [{"type": "text", "text": "withheld"}], "isError": True}
    with pytest.raises(RateLimited):
        await ask(svc, "tools/call", {"name": "js__huge", "arguments": {}})
    assert seen == ["js/echo", "js/inject", "js/huge"]
