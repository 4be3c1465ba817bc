"""A server's extra worker processes: started, watched, restarted when they die, drained on
stop; and how its main process talks to them.

With `workers = N` the `server run` process (the main one) is worker 0: it serves the port like
the others and runs, once for the server, the control plane (election, keepers, serve jobs, the
embedded node agent, heartbeats). It starts N - 1 more processes (`server.worker`) that bind the
same port with SO_REUSEPORT, so the kernel spreads connections over all of them. Each extra
worker answers the data plane (`/v1/*`, `/health`) from its own snapshot of the store and passes
every other request (admin API, agent API, console, `/metrics`) to the main process over a
private Unix socket, so those see exactly one process's state. Each extra worker listens on a
Unix socket of its own as well, for the main process only: its metrics (summed into every scrape)
and "refresh now" (after an admin change, so the next request agrees with the answer, whichever
worker takes it). The other way, an extra worker wakes the main process with a signal when a
request starts waiting for a cold model, so the server's own keeper places its replica at once.

Every extra worker dies with the main process (parent-death signal), and the main process's
engines die with it too, so a `kill -9` of the server leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from llmgw.gateway.metrics import MetricsState
from llmgw.node.process import die_with_parent

logger = logging.getLogger(__name__)

# Where an extra worker's activity (its queues, its use of each replica) is written: a row of
# its own beside the server's, named after it, which cluster status does not list as a server.
_WORKER_ROW = "/worker-"
# A worker that ran this long before it died starts again at once; one that keeps dying soon
# after starting waits longer each time (1 s doubling, at most MAX_DELAY_S).
STABLE_S = 30.0
MAX_DELAY_S = 30.0
# How long the main process waits for a worker's metrics or refresh before going on without it.
PEER_TIMEOUT_S = 2.0
MAIN_SOCKET = "main.sock"
IN_FLIGHT = "in-flight"  # the table of requests in flight (`gateway.inflight`)
ANSWERS = "answers.db"  # the response cache the workers share without Redis (`gateway.cache.file`)
# An extra worker's "look now" to the main process. The worker's demand is in the store
# already; without the signal the main process would see it only when its refresher next polls
# the store's revision (refresh_interval_s), and a cold start through a worker would wait that
# long. Signals of one kind that arrive together are delivered once: a wake means "look now".
WAKE_SIGNAL = signal.SIGUSR1


def worker_row(server_id: str, index: int) -> str:
    """The id of extra worker `index`'s activity row."""
    return f"{server_id}{_WORKER_ROW}{index}"


def is_worker_row(row_id: str) -> bool:
    """Whether a server row is an extra worker's, not a server's."""
    return _WORKER_ROW in row_id


def worker_socket(run_dir: Path, index: int) -> Path:
    """Extra worker `index`'s private socket."""
    return run_dir / f"worker-{index}.sock"


@dataclass(frozen=True)
class Slot:
    """One extra worker as its supervisor sees it."""

    index: int
    running: bool = False
    started_at: float | None = None
    exited_at: float | None = None
    failures: int = 0  # deaths in a row, each soon after its start


def restart_delay(failures: int) -> float:
    """How long after a death the worker starts again: at once the first time, then 1 s
    doubling up to MAX_DELAY_S while it keeps dying soon after starting."""
    return 0.0 if failures <= 1 else min(MAX_DELAY_S, 2.0 ** (failures - 2))


def exited(slot: Slot, now: float) -> Slot:
    """`slot` after its process ended at `now`."""
    ran = now - slot.started_at if slot.started_at is not None else 0.0
    failures = 1 if ran >= STABLE_S else slot.failures + 1
    return replace(slot, running=False, exited_at=now, failures=failures)


def plan(slots: list[Slot], now: float) -> tuple[list[int], float | None]:
    """The workers to start now, and when to look again for the others (None: nothing waits)."""
    start, wake = [], None
    for slot in slots:
        if slot.running:
            continue
        due = (slot.exited_at or now) + restart_delay(slot.failures)
        if slot.exited_at is None or due <= now:
            start.append(slot.index)
        else:
            wake = due if wake is None else min(wake, due)
    return start, wake


class WorkerPool:
    """Starts extra workers 1..count-1 with `argv(index)` and keeps them running until `stop`."""

    def __init__(self, argv: Callable[[int], list[str]], count: int, drain_timeout_s: float,
                 monotonic: Callable[[], float] = time.monotonic,
                 on_exit: Callable[[int], None] = lambda index: None) -> None:
        """`on_exit(index)` runs when worker `index` died, before it is started again."""
        self._argv = argv
        self._on_exit = on_exit
        self._slots = {i: Slot(i) for i in range(1, count)}
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._drain_timeout_s = drain_timeout_s
        self._monotonic = monotonic
        self._changed = asyncio.Event()
        self._stopping = False
        self._watchers: set[asyncio.Task[None]] = set()

    @property
    def pids(self) -> dict[int, int]:
        """The running workers' process ids, by index."""
        return {i: p.pid for i, p in self._procs.items() if p.returncode is None}

    async def run(self) -> None:
        """Start the workers, restart each that dies, until cancelled (then `stop` them)."""
        while not self._stopping:
            now = self._monotonic()
            start, wake = plan(list(self._slots.values()), now)
            for index in start:
                await self._start(index)
            self._changed.clear()
            timeout = None if wake is None else max(0.0, wake - self._monotonic())
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass

    async def _start(self, index: int) -> None:
        # Forked from the event loop's thread, which lives as long as the process: the
        # parent-death signal fires when the forking thread dies.
        proc = await asyncio.create_subprocess_exec(
            *self._argv(index), stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent)
        self._procs[index] = proc
        self._slots[index] = replace(self._slots[index], running=True,
                                     started_at=self._monotonic())
        logger.info("worker %d started (pid %d)", index, proc.pid)
        watcher = asyncio.get_running_loop().create_task(self._watch(index, proc),
                                                         name=f"worker-{index}")
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, index: int, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self._stopping:
            return
        slot = exited(self._slots[index], self._monotonic())
        self._slots[index] = slot
        self._on_exit(index)  # its requests in flight died with it
        logger.warning("worker %d (pid %d) exited with %s; starting it again in %.0fs", index,
                       proc.pid, code, restart_delay(slot.failures))
        self._changed.set()

    async def stop(self) -> None:
        """SIGTERM every worker (each drains its requests in flight, within drain_timeout_s,
        and writes its usage), wait for them, SIGKILL any that outlasts the drain by 10 s."""
        self._stopping = True
        self._changed.set()
        procs = [p for p in self._procs.values() if p.returncode is None]
        for proc in procs:
            _signal(proc.pid, signal.SIGTERM)
        if procs:
            await self._reap(procs)
        for watcher in list(self._watchers):
            watcher.cancel()
            await asyncio.wait({watcher})

    async def _reap(self, procs: list[asyncio.subprocess.Process]) -> None:
        waits = [asyncio.ensure_future(p.wait()) for p in procs]
        _done, late = await asyncio.wait(waits, timeout=self._drain_timeout_s + 10.0)
        for proc in procs:
            if proc.returncode is None:
                logger.warning("worker pid %d did not stop in time; killing it", proc.pid)
                _signal(proc.pid, signal.SIGKILL)
        if late:
            await asyncio.wait(late)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def listen_for_wakes(loop: asyncio.AbstractEventLoop, look: Callable[[], None]) -> None:
    """In the main process, before it starts any worker: run `look` whenever a worker wakes it
    (`wake_main`). Before this, the signal would end the process."""
    loop.add_signal_handler(WAKE_SIGNAL, look)


def ignore_wakes(loop: asyncio.AbstractEventLoop) -> None:
    """In the main process, once its workers are stopped: a wake still on its way is ignored.
    The loop would otherwise restore the signal's default action, which ends the process."""
    loop.remove_signal_handler(WAKE_SIGNAL)
    signal.signal(WAKE_SIGNAL, signal.SIG_IGN)


def wake_main(main_pid: int, parent: Callable[[], int] = os.getppid,
              kill: Callable[[int, int], None] = os.kill) -> Callable[[], None]:
    """In an extra worker: a call that wakes the main process `main_pid` (see WAKE_SIGNAL). It
    never raises and never waits; it does nothing once `main_pid` is no longer this process's
    parent (the main process is gone, and the worker about to go with it: the pid may be
    another process's by now)."""

    def wake() -> None:
        if parent() != main_pid:
            return
        try:
            kill(main_pid, WAKE_SIGNAL)
        except OSError as exc:  # gone in between: nobody to wake
            logger.debug("could not wake the main process: %s", type(exc).__name__)

    return wake


class Peers:
    """The main process's line to its extra workers' private sockets."""

    def __init__(self, sockets: list[Path]) -> None:
        self._sockets = sockets
        self._sessions: dict[Path, aiohttp.ClientSession] = {}

    def _session(self, path: Path) -> aiohttp.ClientSession:
        session = self._sessions.get(path)
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=str(path)),
                timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S),
                cookie_jar=aiohttp.DummyCookieJar())
            self._sessions[path] = session
        return session

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    async def states(self) -> list[MetricsState]:
        """Every reachable worker's metrics (one that is restarting is left out)."""
        found = await asyncio.gather(*(self._state(p) for p in self._sockets))
        return [s for s in found if s is not None]

    async def _state(self, path: Path) -> MetricsState | None:
        try:
            async with self._session(path).get("http://worker/state") as resp:
                if resp.status == 200:
                    state: MetricsState = await resp.json()
                    return state
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.debug("no metrics from %s: %s", path.name, type(exc).__name__)
        return None

    async def refresh(self) -> None:
        """Have every worker reload its snapshot now, and wait (at most PEER_TIMEOUT_S) until
        they have."""
        await asyncio.gather(*(self._refresh(p) for p in self._sockets))

    async def _refresh(self, path: Path) -> None:
        try:
            async with self._session(path).post("http://worker/refresh") as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            # A worker that is restarting loads the newest snapshot before it listens.
            logger.debug("could not refresh %s: %s", path.name, type(exc).__name__)
