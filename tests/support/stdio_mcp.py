"""A tiny stdio MCP server made with the official SDK, for the stdio bridge's tests.

`python tests/support/stdio_mcp.py [TAG]`: TAG (a test's tmp path) only marks the command line,
so the suite's leak check finds the process if a test leaves it behind. Its tools: `echo`,
`wait` (answers once `release` was called: concurrent calls that must overlap), `release`,
`pid` (its own process id, to kill it) and `env` (one environment variable's value).
"""

from __future__ import annotations

import asyncio
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("stdio-test")
_released = asyncio.Event()


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
async def wait(tag: str) -> str:
    """Answer `tag` once `release` was called."""
    await _released.wait()
    return tag


@server.tool()
def release() -> str:
    """Let every `wait` answer."""
    _released.set()
    return "released"


@server.tool()
def pid() -> int:
    """This process's id."""
    return os.getpid()


@server.tool()
def env(name: str) -> str:
    """The value of environment variable `name` ("" when unset)."""
    return os.environ.get(name, "")


if __name__ == "__main__":
    server.run("stdio")
