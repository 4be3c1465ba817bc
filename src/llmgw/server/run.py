"""`llmgw server run`: serve until SIGINT or SIGTERM, then stop every engine and task."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from llmgw.api.appkeys import GATEWAY
from llmgw.api.edge import EdgeLimits, EdgeRunner
from llmgw.api.hot_edge import hot_routes
from llmgw.core.errors import ConfigError
from llmgw.core.ids import secret_check
from llmgw.core.settings import ServerSettings, load
from llmgw.gateway.inflight import SharedInFlight
from llmgw.gateway.windows import SharedWindows
from llmgw.server.app import Server
from llmgw.server.workers import (
    ANSWERS,
    IN_FLIGHT,
    MAIN_SOCKET,
    Peers,
    WorkerPool,
    ignore_wakes,
    listen_for_wakes,
    worker_socket,
)
from llmgw.store.db import redact
from llmgw.store.install_repo import JOIN_HINT
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

# The young generation is collected every GC_THRESHOLDS[0] allocations rather than 700: a request
# allocates a few hundred containers, nearly all freed by reference counting, so the default
# collected several times per request for nothing.
GC_THRESHOLDS = (50_000, 20, 20)
# Where the soft limit stops when the hard one is unlimited (the kernel refuses more than nr_open).
OPEN_FILES_CAP = 1 << 20


def raise_open_files_limit(
    get: Callable[[int], tuple[int, int]] = resource.getrlimit,
    set_: Callable[[int, tuple[int, int]], None] = resource.setrlimit,
) -> int:
    """Raise the soft open-files limit to the hard one (each connection holds a descriptor);
    returns the limit now in force."""
    soft, hard = get(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            set_(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-files limit from %d to %d: %s",
                           soft, target, exc)
    return soft


async def serve(
    data_dir: Path,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str], None] = lambda url: None,
    workers: int | None = None,
    log: tuple[str, str] = ("info", "json"),
) -> None:
    """Open the store, start the app and loops (and the extra workers, when `workers` or
    `[server] workers` asks for more than one), and wait for a stop signal. `log` is the level
    and format the extra workers log with."""
    settings = load(data_dir)
    overrides = {k: v for k, v in (("host", host), ("port", port), ("workers", workers))
                 if v is not None}
    settings = settings.model_copy(update=overrides)
    count = settings.worker_count()
    url = settings.database_url(data_dir)
    store = await asyncio.to_thread(Store.open, url)
    check = secret_check(bytes.fromhex(settings.key_secret))
    if not await asyncio.to_thread(store.install.claim_secret, check):
        store.close()
        raise ConfigError(f"{data_dir / 'config.toml'} does not belong to the install in "
                          f"database {redact(url)}: {JOIN_HINT}")
    run_dir = Path(tempfile.mkdtemp(prefix="llmgw-")) if count > 1 else None  # mode 0700
    peers, flight, windows = None, None, None
    if run_dir is not None:
        peers = Peers([worker_socket(run_dir, i) for i in range(1, count)])
        flight = SharedInFlight(run_dir / IN_FLIGHT, count, 0, create=True)
        windows = SharedWindows(run_dir, count, 0, create=True)
    server = Server(data_dir, settings, store, peers=peers, flight=flight, windows=windows,
                    answer_file=run_dir / ANSWERS if run_dir is not None else None)
    logger.info("open files limit: %d (one per connection, engine and database connection)",
                raise_open_files_limit())
    runner = app_runner(server.build_app(), edge_limits(settings))
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pool: WorkerPool | None = None
    pool_task: asyncio.Task[None] | None = None
    try:
        # With several workers every one binds the port with SO_REUSEPORT: the kernel spreads
        # new connections over them.
        site = web.TCPSite(runner, settings.host, settings.port, reuse_port=count > 1 or None)
        await site.start()
        bound = runner.addresses[0]
        if run_dir is not None:
            listen_for_wakes(loop, server.notifier.changed)
            await web.UnixSite(runner, str(run_dir / MAIN_SOCKET)).start()
            assert server.server_id is not None
            argv = worker_argv(data_dir, settings.host, int(bound[1]), run_dir,
                               server.server_id, count, log)
            assert flight is not None
            pool = WorkerPool(argv, count, settings.drain_timeout_s, on_exit=flight.forget)
            pool_task = asyncio.create_task(pool.run(), name="workers")
            logger.info("serving with %d workers (this process and %d more)", count, count - 1)
        # Everything loaded so far (SQLAlchemy, pydantic, the app) lives as long as the process:
        # moving it out of the collector's reach keeps full collections from pausing every
        # request in flight (measured: p99 at 32 connections fell from ~50 ms to ~12 ms).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        on_ready(f"http://{bound[0]}:{bound[1]}")
        await stop.wait()
        logger.info("stopping: control loops first, then requests in flight get up to %gs",
                    settings.drain_timeout_s)
    finally:
        await stop_gracefully(server, runner, pool)
        if pool_task is not None:
            pool_task.cancel()
            await asyncio.wait({pool_task})
        if peers is not None:
            await peers.close()
        if flight is not None:
            flight.close()
        if windows is not None:
            windows.close()
        if run_dir is not None:
            ignore_wakes(loop)
            shutil.rmtree(run_dir, ignore_errors=True)


def worker_argv(data_dir: Path, host: str, port: int, run_dir: Path, server_id: str,
                count: int, log: tuple[str, str]) -> Callable[[int], list[str]]:
    """The command line of extra worker `index` (the port as bound, so port 0 works too)."""

    main_pid = os.getpid()

    def argv(index: int) -> list[str]:
        return [sys.executable, "-m", "llmgw.server.worker", "--data-dir", str(data_dir),
                "--host", host, "--port", str(port), "--index", str(index),
                "--run-dir", str(run_dir), "--server-id", server_id, "--workers", str(count),
                "--main-pid", str(main_pid), "--log-level", log[0], "--log-format", log[1]]

    return argv


def edge_limits(settings: ServerSettings) -> EdgeLimits:
    """The HTTP edge's bounds, as the install configures them."""
    return EdgeLimits(header_timeout_s=settings.header_timeout_s,
                      keepalive_timeout_s=settings.keepalive_timeout_s,
                      max_per_client=settings.max_connections_per_client,
                      drain_timeout_s=settings.drain_timeout_s)


async def stop_gracefully(server: Server, runner: EdgeRunner,
                          pool: WorkerPool | None = None) -> None:
    """Leave the cluster first (election, lease, keepers, heartbeats), so a successor takes
    over at once; then stop listening and let requests in flight finish within the drain bound,
    in every worker at once; then stop engines and tasks."""
    await server.step_down()
    if pool is None:
        await runner.cleanup()
        return
    await asyncio.gather(pool.stop(), runner.cleanup())


def app_runner(app: web.Application, limits: EdgeLimits | None = None) -> EdgeRunner:
    """How `server run` serves its app. A client that goes away cancels its request's handler
    (aiohttp leaves it running by default): the upstream call stops at once and the key's
    in-flight slot is freed, rather than both waiting for the upstream to finish or time out."""
    gateway = app.get(GATEWAY)
    # The data plane's hot routes on llmgw's own connections; the rest on aiohttp's.
    hot = hot_routes(gateway, app._client_max_size) if gateway is not None else None
    return EdgeRunner(app, limits or EdgeLimits(), hot, handler_cancellation=True)


def run(data_dir: Path, host: str | None, port: int | None, on_ready: Callable[[str], None],
        workers: int | None = None, log: tuple[str, str] = ("info", "json")) -> None:
    """Run the server on uvloop when it is installed."""
    coro = serve(data_dir, host, port, on_ready, workers, log)
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)
