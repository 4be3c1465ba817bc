"""One stdio MCP server as a child process, shared by concurrent callers.

The child speaks JSON-RPC, one message a line, on its stdin and stdout. Callers' requests are
multiplexed over it: each gets an id of the multiplexer's own on the way in and its own id back
on the way out, so two callers that both sent id 1 each get their own answer. The `initialize`
handshake is made once, at start, and its answer is what every later `initialize` is told.
Requests the child makes of its client (sampling, roots) are refused: nobody is on the other
end of a stateless gateway to answer them; its notifications (log lines, progress) are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from llmgw.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable
from llmgw.node.process import die_with_parent, terminate

logger = logging.getLogger(__name__)

# The protocol version the multiplexer asks the child for; the child answers the one it speaks.
PROTOCOL_VERSION = "2025-06-18"
# The largest line the child may write (a tool's result, base64 images included).
MAX_LINE_BYTES = 80 * 1024 * 1024
# What of the node's environment a child gets besides its server's `env`: enough for an
# interpreter or `npx` to run, nothing of llmgw's (its join token, the engine key).
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
CLIENT_INFO = {"name": "llmgw-mcp-bridge", "version": "1"}
# The bridge (`llmgw.api.mcp_bridge`): how a node agent runs it, the variable its server's
# `env` travels in (as JSON: secrets stay out of argv, which anyone on the node can read), and
# its paths.
BRIDGE_MODULE = "llmgw.api.mcp_bridge"
BRIDGE_ENV = "LLMGW_MCP_ENV"
MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
Message = dict[str, Any]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The child's whole environment: the node's basics, then the server's own `env`."""
    return {**{k: os.environ[k] for k in BASE_ENV if k in os.environ}, **env}


class StdioMcp:
    """A stdio MCP server's process and the callers waiting on its answers."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._argv = argv
        self._env = child_env(env)
        self._log_path = log_path
        self._limit = max_line_bytes
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._ids = itertools.count(1)
        self._write = asyncio.Lock()
        self.initialized: Message | None = None  # the child's answer to `initialize`

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return (self._proc is not None and self._proc.returncode is None
                and self._reader is not None and not self._reader.done())

    async def start(self, timeout_s: float) -> None:
        """Start the child and make the handshake; UpstreamError (the child is then stopped)
        when it cannot be started or does not answer within `timeout_s`."""
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self._log_path, "ab") as log:
                self._proc = await asyncio.create_subprocess_exec(
                    *self._argv, env=self._env, stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=log, limit=self._limit,
                    start_new_session=True, preexec_fn=die_with_parent)
        except OSError as exc:
            raise UpstreamUnreachable(f"cannot start {self._argv[0]}: {exc.strerror}") from exc
        self._reader = asyncio.create_task(self._read(), name=f"mcp-stdio-{self._proc.pid}")
        try:
            answer = await self.request({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                         "params": {"protocolVersion": PROTOCOL_VERSION,
                                                    "capabilities": {},
                                                    "clientInfo": CLIENT_INFO}}, timeout_s)
            if "result" not in answer:
                raise UpstreamError("the MCP server refused the initialize handshake")
            await self.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except BaseException:
            await self.close()
            raise
        self.initialized = answer["result"]

    async def request(self, message: Message, timeout_s: float) -> Message:
        """Send one JSON-RPC request and return the child's answer to it, with the caller's id."""
        ours = next(self._ids)
        theirs = message.get("id")
        waiter: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[ours] = waiter
        try:
            await self._send({**message, "id": ours})
            answer = await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError as exc:
            self._cancel(ours, "timed out")
            raise UpstreamTimeout(f"the MCP server did not answer within {timeout_s:g}s") from exc
        except asyncio.CancelledError:
            self._cancel(ours, "the caller went away")
            raise
        finally:
            self._pending.pop(ours, None)
        return {**answer, "id": theirs}

    async def notify(self, message: Message) -> None:
        """Pass a caller's notification on, but for a cancellation: callers' ids are not unique
        (two may both use 1), so one could cancel another's call. A call is cancelled when its
        caller goes away or its time is up (`request`)."""
        if message.get("method") != "notifications/cancelled":
            await self._send(message)

    def _cancel(self, ours: int, reason: str) -> None:
        """Tell the child to stop working on request `ours` (best effort, without waiting)."""
        proc = self._proc
        if self.alive and proc is not None and proc.stdin is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                proc.stdin.write(orjson.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                               "params": {"requestId": ours, "reason": reason}})
                                 + b"\n")

    async def wait(self) -> int:
        """Until the child ends (or stops speaking): its exit status."""
        assert self._proc is not None and self._reader is not None
        await asyncio.wait({self._reader})
        if self._proc.returncode is None:  # it stopped speaking (a line over the limit)
            await terminate(self._proc, 5.0)
        return await self._proc.wait()

    async def close(self, grace_s: float = 5.0) -> None:
        """Stop the child's process group and fail whoever still waits."""
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            await terminate(self._proc, grace_s)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait({self._reader})
        self._fail_all("the MCP server's process ended")

    async def _send(self, message: Message) -> None:
        proc = self._proc
        if not self.alive or proc is None or proc.stdin is None:
            raise UpstreamUnreachable("the MCP server's process is not running")
        async with self._write:
            try:
                proc.stdin.write(orjson.dumps(message) + b"\n")
                await proc.stdin.drain()
            except (ConnectionError, RuntimeError) as exc:
                raise UpstreamUnreachable("the MCP server's process is not running") from exc

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        out = self._proc.stdout
        try:
            while line := await out.readline():
                await self._dispatch(line)
        except ValueError:
            # A line over the limit: the stream cannot be read on from the middle of a message.
            logger.warning("MCP server pid %d wrote a line over %d bytes; stopping it",
                           self._proc.pid, self._limit)
        finally:
            self._fail_all("the MCP server's process ended")

    async def _dispatch(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return  # not JSON-RPC (a stray print): the protocol has nothing to say of it
        if not isinstance(message, dict):
            return
        if "method" not in message:
            ours = message.get("id")
            waiter = self._pending.get(ours) if isinstance(ours, int) else None
            if waiter is not None and not waiter.done():
                waiter.set_result(message)
        elif "id" in message:
            # A request of the child's to its client: only a ping has an answer here.
            reply: Message = ({"result": {}} if message["method"] == "ping" else
                              {"error": {"code": -32601, "message": "not supported by llmgw"}})
            with contextlib.suppress(UpstreamError):
                await self._send({"jsonrpc": "2.0", "id": message["id"], **reply})

    def _fail_all(self, why: str) -> None:
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(UpstreamUnreachable(why))
