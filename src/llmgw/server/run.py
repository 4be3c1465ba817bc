"""`llmgw server run`: serve until SIGINT or SIGTERM, then stop every engine and task."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from llmgw.core.errors import ConfigError
from llmgw.core.ids import secret_check
from llmgw.core.settings import load
from llmgw.server.app import Loops, Server
from llmgw.store.db import redact
from llmgw.store.install_repo import JOIN_HINT
from llmgw.store.store import Store

logger = logging.getLogger(__name__)


async def serve(
    data_dir: Path,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str], None] = lambda url: None,
) -> None:
    """Open the store, start the app and loops, and wait for a stop signal."""
    settings = load(data_dir)
    overrides = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    settings = settings.model_copy(update=overrides)
    url = settings.database_url(data_dir)
    store = await asyncio.to_thread(Store.open, url)
    check = secret_check(bytes.fromhex(settings.key_secret))
    if not await asyncio.to_thread(store.install.claim_secret, check):
        store.close()
        raise ConfigError(f"{data_dir / 'config.toml'} does not belong to the install in "
                          f"database {redact(url)}: {JOIN_HINT}")
    server = Server(data_dir, settings, store, loops=Loops(keeper_s=settings.keeper_interval_s))
    runner = app_runner(server.build_app())
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        await site.start()
        bound = runner.addresses[0]
        # Everything loaded so far (SQLAlchemy, pydantic, the app) lives as long as the process:
        # moving it out of the collector's reach keeps full collections from pausing every
        # request in flight (measured: p99 at 32 connections fell from ~50 ms to ~12 ms).
        gc.collect()
        gc.freeze()
        on_ready(f"http://{bound[0]}:{bound[1]}")
        await stop.wait()
        logger.info("stopping: engines get SIGTERM, then SIGKILL")
    finally:
        await runner.cleanup()


def app_runner(app: web.Application) -> web.AppRunner:
    """How `server run` serves its app. A client that goes away cancels its request's handler
    (aiohttp leaves it running by default): the upstream call stops at once and the key's
    in-flight slot is freed, rather than both waiting for the upstream to finish or time out."""
    return web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)


def run(data_dir: Path, host: str | None, port: int | None, on_ready: Callable[[str], None]) -> None:
    """Run the server on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(data_dir, host, port, on_ready))
    else:
        uvloop.run(serve(data_dir, host, port, on_ready))
