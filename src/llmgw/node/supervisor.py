"""Supervising one replica's engine process: start, wait until healthy, warm it up, restart with
backoff, and give up on a crash loop with the reason in words."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from llmgw.core.errors import EngineError
from llmgw.core.types import ReplicaState
from llmgw.engines import crashes
from llmgw.engines.crashes import GAVE_UP, RESTARTING, Exit
from llmgw.node.hardware import free_port
from llmgw.node.process import log_size, since, spawn, tail, terminate

logger = logging.getLogger(__name__)

# A replica that stayed ready this long has recovered: its next crash starts backoff over.
STABLE_AFTER_S = 60.0
# Failed starts in a row after which a replica stays failed until its model or profile changes:
# with backoff 1, 2, 4, 8 s that is about 15 s of retries plus the starts themselves, enough
# to ride out a port race or a slow disk, short enough that a crash loop is named, not hidden.
MAX_FAILURES = 5
# How long a warm-up may take before the replica is reported ready without it: longer than a cold
# judgment of a CPU judge (seconds), short enough that an engine that answers its health check
# and never its first request is serving or failing within a minute, not wedged in starting.
WARM_UP_S = 60.0

# An argv value longer than this (a chat template runs to thousands of characters) is cut in the
# log line that starts a replica, which says how long it was; paths and flags stay whole.
LOGGED_ARG_CHARS = 200


def loggable(argv: list[str]) -> str:
    """An engine's argv as one log line: each value on one line, a long one cut to its start and
    its length (the profile holds it whole: `llmgw ctl --json model list`)."""
    shown = []
    for arg in argv:
        line = arg.replace("\r", "\\r").replace("\n", "\\n")
        if len(line) > LOGGED_ARG_CHARS:
            line = f"{line[:40]}…({len(arg)} characters)"
        shown.append(line)
    return " ".join(shown)


# Given how an engine's start ended and the argv it ran with, a change that makes the next start
# differ (said in words), or None: a remedy tried at once instead of a failure counted.
Adapt = Callable[[Exit, list[str]], str | None]


@dataclass(frozen=True)
class WarmUp:
    """Requests sent to an engine once it is healthy, before its replica is reported ready.

    A judge's first judgment pays for paging its weights in and for evaluating the judge's long
    fixed prompt on a slot whose KV cache is empty: seconds on a CPU, the whole of a 5 s budget on
    a small machine. Sent here, one per slot, that cost is paid before the first user's judgment
    and each slot's cache holds the fixed prompt. A warm-up that fails or outlasts `timeout_s` is
    logged and the replica is reported ready all the same: the engine is healthy, and a judge
    that is not ready fails every judgment, which is worse than one slow judgment.
    """

    path: str
    bodies: tuple[bytes, ...]  # sent at once, each as a JSON body
    timeout_s: float = WARM_UP_S
    # Holds the engine key: never in a repr, so never in a log.
    headers: dict[str, str] = field(default_factory=dict, repr=False)


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
    max_failures: int = MAX_FAILURES
    # The engine's name in what a crash is said as ("llama-server stopped with …").
    engine: str = "engine"
    adapt: Adapt | None = None
    warm_up: WarmUp | None = None
    # Holds the engine key: never in a repr, so never in a log.
    env: dict[str, str] = field(default_factory=dict, repr=False)
    # Placed on GPUs: an engine whose log says it found none is stopped rather than left
    # serving from the CPU.
    on_gpu: bool = False
    # Sent with each health check: an engine that guards its readiness path with the engine key
    # (vLLM's `/v1/models` with `--api-key`) must be asked with it. Never in a repr either.
    health_headers: dict[str, str] = field(default_factory=dict, repr=False)
    # False for a process that serves no model (a stdio MCP server's bridge): its crashes are
    # said without a model engine's remedies.
    serves_a_model: bool = True


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
    # Set when `run` returned because the engine kept failing to start.
    gave_up: bool = False
    _proc: asyncio.subprocess.Process | None = field(default=None, repr=False)

    async def run(self) -> None:
        """Start, watch and restart the engine; returns once it gave up on a crash loop (the
        replica reported failed, with why), else only when cancelled."""
        launch, rid = self.launch, self.launch.replica_id
        failures = 0  # in a row, for the backoff
        failed_starts = 0  # in a row that never became ready, for the cap: a replica that
        # serves a while between crashes is restarted with backoff, never given up on
        error: str | None = None
        try:
            while True:
                await asyncio.sleep(backoff_delay(failures, launch.backoff_base_s, launch.backoff_cap_s))
                ready_at, ended, argv, error = await self._run_once(_restarting(failures, error))
                if ready_at is not None and self.monotonic() - ready_at >= STABLE_AFTER_S:
                    failures = 0
                change = (launch.adapt(ended, argv) if launch.adapt is not None and ended is not None
                          and ready_at is None else None)
                if change is not None:
                    logger.warning("replica %s: %s; %s", rid, _first_line(error), change)
                    continue
                failures += 1
                failed_starts = 0 if ready_at is not None else failed_starts + 1
                self.restarts += 1
                if failed_starts >= launch.max_failures:
                    error = (f"{GAVE_UP} {failed_starts} failed starts in a row (it starts again when "
                             f"its model or profile changes, or llmgw restarts): {error}")
                    logger.error("replica %s failed: %s", rid, error)
                    await self.report(rid, Status(ReplicaState.FAILED, restarts=self.restarts,
                                                  last_error=error))
                    self.gave_up = True
                    return
                delay = backoff_delay(failures, launch.backoff_base_s, launch.backoff_cap_s)
                logger.warning("replica %s failed (%d of %d failed starts in a row; next start in "
                               "%gs): %s", rid, failed_starts, launch.max_failures, delay, error)
                await self.report(rid, Status(ReplicaState.FAILED, restarts=self.restarts,
                                              last_error=error))
        finally:
            if self._proc is not None:
                await asyncio.shield(terminate(self._proc, self.launch.stop_grace_s))

    async def _run_once(
        self, restarting: str | None
    ) -> tuple[float | None, Exit | None, list[str], str]:
        """One engine process from start to exit: when it became ready, how it ended (None when
        it never ran or llmgw stopped it), its argv, and why it ended in words."""
        launch = self.launch
        port = free_port(launch.host)
        argv = launch.command(port)
        logger.info("starting replica %s: %s", launch.replica_id, loggable(argv))
        start = log_size(launch.log_path)
        try:
            proc = await spawn(argv, launch.log_path, launch.env)
        except OSError as exc:
            return None, None, argv, f"cannot start engine {argv[0]}: {exc}"
        self._proc = proc
        # A restart keeps saying what the last start died of: a crash loop must not look like a
        # slow first start in the console.
        await self.report(launch.replica_id, Status(ReplicaState.STARTING, pid=proc.pid,
                                                    restarts=self.restarts, last_error=restarting))
        base = f"http://{launch.host}:{port}"
        try:
            code = await wait_healthy(proc, base + launch.health_path, launch.start_timeout_s,
                                      self.monotonic, launch.health_headers)
        except TimeoutError:
            await terminate(proc, launch.stop_grace_s)
            self._proc = None
            return None, None, argv, (f"{launch.engine} did not become healthy within "
                                      f"{launch.start_timeout_s:g}s\nengine log: {launch.log_path}")
        if code is None and self._found_no_gpu(start):
            await terminate(proc, launch.stop_grace_s)
            self._proc = None
            return None, None, argv, f"{crashes.NO_CUDA}\nengine log: {launch.log_path}"
        if code is None and launch.warm_up is not None:
            code = await warm_up(proc, base, launch.warm_up, launch.replica_id)
        if code is not None:
            self._proc = None
            await terminate(proc, 0)  # reap anything left in its process group
            ended = Exit(code)
            return None, ended, argv, self._said(ended, start)
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
        ended = Exit(code, was_ready=True)
        return ready_at, ended, argv, self._said(ended, start)

    def _said(self, ended: Exit, start: int) -> str:
        log = self.launch.log_path
        return crashes.message(self.launch.engine, ended, str(log), tail(log),
                               self._found_no_gpu(start), self.launch.serves_a_model)

    def _found_no_gpu(self, start: int) -> bool:
        """Whether a GPU replica's engine logged, since `start`, that it found no GPU."""
        return self.launch.on_gpu and crashes.no_gpu(since(self.launch.log_path, start))


async def wait_healthy(
    proc: asyncio.subprocess.Process, url: str, timeout_s: float, monotonic: Callable[[], float],
    headers: dict[str, str] | None = None,
) -> int | None:
    """None once `url` answers 200 (asked with `headers`); the exit code if the process ends
    first; TimeoutError after `timeout_s`."""
    deadline = monotonic() + timeout_s
    timeout = aiohttp.ClientTimeout(total=2)
    # One waiter for the whole start, so polling wakes at once if the process dies.
    exited = asyncio.ensure_future(proc.wait())
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not exited.done():
                try:
                    async with session.get(url, headers=headers) as resp:
                        if resp.status == 200:
                            return None
                except (aiohttp.ClientError, TimeoutError):
                    pass  # not listening yet
                if monotonic() >= deadline:
                    raise TimeoutError
                await asyncio.wait({exited}, timeout=0.2)
        return exited.result()
    finally:
        if not exited.done():
            exited.cancel()


async def warm_up(proc: asyncio.subprocess.Process, base: str, warm: WarmUp,
                  replica_id: str) -> int | None:
    """Send `warm`'s requests to the engine at `base`; None once they were answered, failed or
    ran out of time (the last two logged), the exit code if the process ends first."""
    exited = asyncio.ensure_future(proc.wait())
    sending = asyncio.ensure_future(_send_warm_up(base, warm))
    try:
        done, _ = await asyncio.wait({exited, sending}, timeout=warm.timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            return exited.result()
        if sending not in done:
            logger.warning("replica %s: warm-up not answered within %gs; ready without it (its "
                           "first requests may be slow)", replica_id, warm.timeout_s)
        elif (exc := sending.exception()) is not None:
            logger.warning("replica %s: warm-up failed (%s); ready without it (its first "
                           "requests may be slow)", replica_id, exc)
        return None
    finally:
        left = [t for t in (exited, sending) if not t.done()]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)


async def _send_warm_up(base: str, warm: WarmUp) -> None:
    """Every warm-up request at once; EngineError when one is not answered 200."""
    headers = {"Content-Type": "application/json", **warm.headers}

    async def one(http: aiohttp.ClientSession, body: bytes) -> None:
        try:
            async with http.post(base + warm.path, data=body, headers=headers) as resp:
                await resp.read()
        except aiohttp.ClientError as exc:
            raise EngineError(f"{type(exc).__name__} from {warm.path}") from exc
        if resp.status != 200:
            raise EngineError(f"{warm.path} answered {resp.status}")

    async with aiohttp.ClientSession() as http:
        # Each to its end: the session closes only once none is in flight.
        results = await asyncio.gather(*(one(http, body) for body in warm.bodies),
                                       return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _restarting(failures: int, error: str | None) -> str | None:
    """What a restart says while it starts: how many starts failed, and the last one's reason."""
    if not failures or not error:
        return None
    return f"{RESTARTING} {failures} failed start(s) in a row: {error}"


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]
