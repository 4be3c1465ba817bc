"""The stdio MCP servers a node runs: one bridge (`llmgw.api.mcp_bridge`) per server, each
supervised as an engine is (its own process group, its log, restarts with back-off, given up
on after failed starts in a row, with what it died of in words).

`plan_runs` decides from plain data; `McpRunner` applies it, on each pass of the node agent.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from llmgw.core.clock import Clock
from llmgw.core.engine_command import KEY_ENV
from llmgw.core.mcp import McpServer, McpTransport
from llmgw.core.types import ReplicaState
from llmgw.node.mcp_stdio import BRIDGE_ENV, BRIDGE_MODULE, HEALTH_PATH, MCP_PATH
from llmgw.node.supervisor import MAX_FAILURES, Launch, Status, Supervisor

logger = logging.getLogger(__name__)

Reporter = Callable[[str, Status], Awaitable[None]]


@dataclass(frozen=True)
class McpRunConfig:
    """How this node runs stdio MCP servers."""

    host: str
    log_dir: Path
    # The node's engine key: every call to a bridge must carry it. None: no key (the bridge
    # then refuses to start).
    engine_key: Callable[[], str | None]
    # The programs stdio servers may run here (names or absolute paths, as a server's command
    # gives them); empty: none.
    commands: frozenset[str] = frozenset()
    start_timeout_s: float = 60.0
    backoff_base_s: float = 1.0
    max_failures: int = MAX_FAILURES


def fingerprint(server: McpServer) -> str:
    """What a run runs: a bridge given up on starts again once this changes, a running one is
    started again with the change."""
    text = server.model_dump_json(include={"command", "env", "timeout_s"})
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class RunPlan:
    start: list[McpServer] = field(default_factory=list)
    # Running with something else than the server now says: stopped, then started (in `start`).
    restart: list[str] = field(default_factory=list)
    # No longer this node's (removed, disabled, moved): stopped if running, and forgotten.
    stop: list[str] = field(default_factory=list)


def plan_runs(servers: list[McpServer], running: dict[str, str],
              gave_up: dict[str, str]) -> RunPlan:
    """What to do given the servers this node runs, those running (name → fingerprint) and
    those given up on (likewise, kept until what they run changes)."""
    wanted = {s.name: s for s in servers if s.enabled and s.transport is McpTransport.STDIO}
    now = {name: fingerprint(s) for name, s in wanted.items()}
    restart = sorted(n for n, ran in running.items() if n in wanted and ran != now[n])
    return RunPlan(
        start=[s for n, s in sorted(wanted.items())
               if (n not in running or n in restart) and gave_up.get(n) != now[n]],
        restart=restart,
        stop=sorted(n for n in {*running, *gave_up} if n not in wanted),
    )


def allowed(server: McpServer, programs: Collection[str]) -> str | None:
    """Why this node does not run `server`'s program, or None when it does: an admin key alone
    must not run programs on a node."""
    program = server.command[0]
    if program in programs:
        return None
    listed = ", ".join(sorted(programs)) or "none"
    return (f"this node does not run MCP servers with program {program!r} (allowed: {listed}); "
            "list it in the node's mcp_commands (llmgw node run --mcp-command, or [server] "
            "mcp_commands for the server's own node)")


class McpRunner:
    """Owns one supervisor task per stdio server running on this node."""

    def __init__(self, config: McpRunConfig, servers: Callable[[], Awaitable[list[McpServer] | None]],
                 report: Reporter, forget: Callable[[str], Awaitable[None]], clock: Clock) -> None:
        self._cfg = config
        self._servers = servers
        self._report = report
        self._forget = forget
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[bool]] = {}
        self._running_as: dict[str, str] = {}
        self._gave_up: dict[str, str] = {}

    @property
    def running(self) -> set[str]:
        return {name for name, task in self._tasks.items() if not task.done()}

    async def reconcile(self) -> None:
        """Read this node's stdio servers (None: not known now; leave things as they are) and
        apply the plan."""
        servers = await self._servers()
        if servers is None:
            return
        self._reap()
        actions = plan_runs(servers, {n: self._running_as[n] for n in self.running},
                            self._gave_up)
        for name in actions.stop:
            await self._stop(name)
            await self._forget(name)
        for name in actions.restart:
            await self._stop(name)
        for server in actions.start:
            await self._start(server)

    def _reap(self) -> None:
        for name, task in list(self._tasks.items()):
            if task.done():
                del self._tasks[name]
                ran = self._running_as.pop(name, "")
                if not task.cancelled() and task.exception() is not None:
                    logger.error("supervisor of MCP server %s died: %r", name, task.exception())
                elif not task.cancelled() and task.result():
                    self._gave_up[name] = ran

    async def _start(self, server: McpServer) -> None:
        self._gave_up.pop(server.name, None)
        why = allowed(server, self._cfg.commands)
        if why is not None:
            await self._report(server.name, Status(ReplicaState.FAILED, last_error=why))
            self._gave_up[server.name] = fingerprint(server)
            return
        name = server.name
        crashed: list[str] = []

        async def report(_rid: str, status: Status) -> None:
            # A run ready again keeps what it last died of: a tool server that crashes now and
            # then says so while it serves (a replica's error clears; its traffic retries).
            if status.state == ReplicaState.FAILED and status.last_error:
                crashed[:] = [status.last_error]
            elif status.state == ReplicaState.READY and crashed:
                status = replace(status, last_error=crashed[0])
            await self._report(name, status)

        sup = Supervisor(self._launch(server), report, self._clock.monotonic)
        self._tasks[name] = asyncio.create_task(self._supervise(sup), name=f"mcp-{name}")
        self._running_as[name] = fingerprint(server)

    @staticmethod
    async def _supervise(sup: Supervisor) -> bool:
        await sup.run()
        return sup.gave_up

    def _launch(self, server: McpServer) -> Launch:
        cfg, log = self._cfg, self._cfg.log_dir / f"mcp-{server.name}.log"
        key = cfg.engine_key()

        def command(port: int) -> list[str]:
            return [sys.executable, "-m", BRIDGE_MODULE, "--host", cfg.host, "--port", str(port),
                    "--log", str(log), "--timeout", f"{server.timeout_s:g}",
                    "--start-timeout", f"{cfg.start_timeout_s:g}", "--", *server.command]

        return Launch(
            replica_id=f"mcp:{server.name}",
            command=command,
            host=cfg.host,
            log_path=log,
            health_path=HEALTH_PATH,
            api_prefix=MCP_PATH,
            # The bridge answers its health check after the child's handshake, within its own
            # start timeout: a little more here, so the bridge's words say why it did not.
            start_timeout_s=cfg.start_timeout_s + 10,
            backoff_base_s=cfg.backoff_base_s,
            max_failures=cfg.max_failures,
            engine=f"MCP server {server.name}",
            serves_a_model=False,
            env={BRIDGE_ENV: orjson.dumps(server.env).decode(), **({KEY_ENV: key} if key else {})},
        )

    async def _stop(self, name: str) -> None:
        self._gave_up.pop(name, None)
        self._running_as.pop(name, None)
        task = self._tasks.pop(name, None)
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})
        logger.info("stopped MCP server %s", name)

    async def stop_all(self) -> None:
        """Stop every bridge (on shutdown), and with each its server."""
        await asyncio.gather(*(self._stop(name) for name in list(self._tasks)))
