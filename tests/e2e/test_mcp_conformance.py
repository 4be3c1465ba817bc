"""The MCP project's own conformance suite (tests/support/mcp_conformance.py) as the test command
runs it: against server-everything, the reference it is checked on, and with a key on every
request for an endpoint that wants one, as llmgw's `/mcp` does."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.support.mcp_conformance import run_conformance
from tests.support.mcp_everything import EverythingServer
from tests.support.server_process import LlmgwServer

# What server-everything (2026.8.31) passes of the suite (0.1.16): the scenarios that need none
# of the suite's own test tools, prompts and resources (`test_image_content`, ...), which it
# does not have. The rest fail on exactly that, and dns-rebinding-protection because it answers
# any Host.
EVERYTHING_PASSES = [
    "logging-set-level", "ping", "prompts-list", "resources-list", "resources-subscribe",
    "resources-unsubscribe", "server-initialize", "server-sse-multiple-streams", "tools-call-error",
    "tools-call-simple-text", "tools-list",
]


def test_server_everything_passes_the_protocols_core_and_fails_where_it_lacks_the_suites_tools(
        everything_http: EverythingServer, tmp_path: Path) -> None:
    run = run_conformance(everything_http.url, tmp_path / "results")
    assert set(EVERYTHING_PASSES) <= set(run.passed()), run.report()
    # A failure is read back with the suite's reason, not lost in the CLI's exit code.
    assert "tools-call-image" in run.failed(), run.report()
    assert run.scenarios["tools-call-image"].failures() == [
        "tools-call-image: No image content found"]
    assert len(run.scenarios) >= 30, run.report()


class _RequireBearer:
    """An endpoint that, like llmgw's `/mcp`, answers 401 to a request without its key."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


@pytest.fixture
def keyed_endpoint() -> Iterator[tuple[str, str]]:
    """The SDK's MCPServer over streamable HTTP behind a key: (its MCP endpoint, the key)."""
    server = MCPServer("keyed")

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message."""
        return message

    key = "sk-conformance-test"
    app = _RequireBearer(server.streamable_http_app(), key)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    http = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/mcp", key
    finally:
        http.should_exit = True
        thread.join(10)
        sock.close()


def test_an_endpoint_that_wants_a_key_is_run_with_it_on_every_request(
        keyed_endpoint: tuple[str, str], tmp_path: Path) -> None:
    url, key = keyed_endpoint
    # Each scenario is a run of the CLI of its own: two with the key, one without.
    with_key = run_conformance(url, tmp_path / "with", scenarios=["server-initialize", "tools-list"],
                               bearer=key)
    assert with_key.passed() == ["server-initialize", "tools-list"], with_key.report()
    without = run_conformance(url, tmp_path / "without", scenarios=["server-initialize"])
    assert without.failed() == ["server-initialize"], without.report()


# What the suite must pass through llmgw's `/mcp` fronting server-everything: the scenarios that
# do not name a tool, prompt or resource (llmgw prefixes every name with its server's, so the
# suite's `test_*` names are never found there).
LLMGW_MUST_PASS = ["dns-rebinding-protection", "logging-set-level", "ping", "prompts-list",
                   "resources-list", "server-initialize", "server-sse-multiple-streams",
                   "tools-list"]


def test_llmgws_mcp_endpoint_passes_the_conformance_core(everything_http: EverythingServer,
                                                         tmp_path: Path) -> None:
    """The suite against llmgw's own `/mcp` on a real server fronting server-everything, with the
    admin key (which may call any tool)."""
    server = LlmgwServer.init(tmp_path / "data", "--no-demo", "--no-guard", "--no-embedded-node")
    server.start()
    try:
        server.ctl("mcp", "add", "everything", "--url", everything_http.url)
        run = run_conformance(server.url + "/mcp", tmp_path / "results", bearer=server.admin_key)
        assert set(LLMGW_MUST_PASS) <= set(run.passed()), run.report()
    finally:
        server.stop()
