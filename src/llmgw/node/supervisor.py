"""Supervising one replica's engine process: start, wait until healthy, restart with backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from llmgw.core.types import ReplicaState
from llmgw.node.hardware import free_port
from llmgw.node.process import spawn, tail, terminate

logger = logging.getLogger(__name__)

# A replica that stayed ready this long has recovered: its next crash starts backoff over.
STABLE_AFTER_S = 60.0


@dataclass(frozen=True)
class Launch:
    """How to run one replica's engine."""

    replica_id: str
    command: Callable[[int], list[str]]  # argv for a given port
    host: str
    log_path: Path
    health_path: str = "/health"
    api_prefix: str = "/v1"
    start_timeout_s: float = 120.0
    stop_grace_s: float = 10.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    # Holds the engine key: never in a repr, so never in a log.
    env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Status:
    """What a supervisor reports about its replica."""

    state: ReplicaState
    endpoint: str | None = None
    pid: int | None = None
    restarts: int = 0
    last_error: str | None = None


Reporter = Callable[[str, Status], Awaitable[None]]


def backoff_delay(failures: int, base_s: float, cap_s: float) -> float:
    """Seconds to wait before the next start after `failures` consecutive failures."""
    if failures <= 0:
        return 0.0
    return float(min(cap_s, base_s * 2 ** (failures - 1)))


@dataclass
class Supervisor:
    """Keeps one engine process running until stopped."""

    launch: Launch
    report: Reporter
    monotonic: Callable[[], float]
    restarts: int = 0
    _proc: asyncio.subprocess.Process | None = field(default=None, repr=False)

    async def run(self) -> None:
        """Start, watch and restart the engine; returns only when cancelled."""
        failures = 0
        try:
            while True:
                await asyncio.sleep(
                    backoff_delay(failures, self.launch.backoff_base_s, self.launch.backoff_cap_s)
                )
                ready_at, error = await self._run_once()
                if ready_at is not None and self.monotonic() - ready_at >= STABLE_AFTER_S:
                    failures = 0
                failures += 1
                self.restarts += 1
                logger.warning("replica %s failed: %s", self.launch.replica_id, error)
                await self.report(
                    self.launch.replica_id,
                    Status(ReplicaState.FAILED, restarts=self.restarts, last_error=error),
                )
        finally:
            if self._proc is not None:
                await asyncio.shield(terminate(self._proc, self.launch.stop_grace_s))

    async def _run_once(self) -> tuple[float | None, str]:
        """One engine process from start to exit: (when it became ready, why it ended)."""
        launch = self.launch
        port = free_port(launch.host)
        argv = launch.command(port)
        logger.info("starting replica %s: %s", launch.replica_id, " ".join(argv))
        try:
            proc = await spawn(argv, launch.log_path, launch.env)
        except OSError as exc:
            return None, f"cannot start engine {argv[0]}: {exc}"
        self._proc = proc
        await self.report(
            launch.replica_id, Status(ReplicaState.STARTING, pid=proc.pid, restarts=self.restarts)
        )
        base = f"http://{launch.host}:{port}"
        error = await self._wait_healthy(proc, base + launch.health_path)
        if error is not None:
            await terminate(proc, launch.stop_grace_s)
            self._proc = None
            return None, error
        ready_at = self.monotonic()
        await self.report(
            launch.replica_id,
            Status(
                ReplicaState.READY,
                endpoint=base + launch.api_prefix,
                pid=proc.pid,
                restarts=self.restarts,
            ),
        )
        code = await proc.wait()
        self._proc = None
        await terminate(proc, 0)  # reap anything left in its process group
        return ready_at, _exit_message(code, launch.log_path)

    async def _wait_healthy(self, proc: asyncio.subprocess.Process, url: str) -> str | None:
        """None once `url` answers 200; else why not (exited, or too slow)."""
        deadline = self.monotonic() + self.launch.start_timeout_s
        timeout = aiohttp.ClientTimeout(total=2)
        # One waiter for the whole start, so polling wakes at once if the process dies.
        exited = asyncio.ensure_future(proc.wait())
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                while not exited.done():
                    try:
                        async with session.get(url) as resp:
                            if resp.status == 200:
                                return None
                    except (aiohttp.ClientError, TimeoutError):
                        pass  # not listening yet
                    if self.monotonic() >= deadline:
                        limit = self.launch.start_timeout_s
                        return f"engine did not become healthy within {limit:g}s"
                    await asyncio.wait({exited}, timeout=0.2)
            return _exit_message(exited.result(), self.launch.log_path)
        finally:
            if not exited.done():
                exited.cancel()


def _exit_message(code: int, log_path: Path) -> str:
    detail = tail(log_path)
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"engine {how}" + (f"; last output:\n{detail}" if detail else "")
