"""One extra worker process of a server (`server.workers` says how they fit together).

Started by the main process as `python -m llmgw.server.worker ...`, never by hand: it answers the
data plane on the server's port (SO_REUSEPORT) from its own snapshot of the store, relays every
other request to the main process, and serves its metrics and "refresh now" to the main process
on a private socket. SIGTERM drains it like the server: it stops listening, gives requests in
flight `drain_timeout_s`, and writes its usage and verdicts before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from llmgw.api import data_plane, mcp
from llmgw.api.appkeys import GATEWAY, GUARD, MCP, METRICS, METRICS_PUBLIC
from llmgw.api.context import TRUSTED_PROXIES, networks
from llmgw.api.endpoints import bind
from llmgw.api.errors import openai_errors
from llmgw.api.forward import main_session, to_main
from llmgw.core.clock import SystemClock
from llmgw.core.settings import ServerSettings, load
from llmgw.gateway.inflight import SharedInFlight
from llmgw.gateway.windows import SharedWindows
from llmgw.server import logs
from llmgw.server.plane import DataPlane, make_tracer
from llmgw.server.plane import build as build_plane
from llmgw.server.run import GC_THRESHOLDS, app_runner, edge_limits, raise_open_files_limit
from llmgw.server.workers import ANSWERS, IN_FLIGHT, MAIN_SOCKET, wake_main, worker_row, worker_socket
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10.0


def data_plane_app(settings: ServerSettings, plane: DataPlane, main_socket: Path
                   ) -> web.Application:
    """The worker's public app: `/v1/*` and `/health` answered here, everything else (admin and
    agent APIs, console, `/metrics`) relayed to the main process."""
    app = web.Application(middlewares=[openai_errors], client_max_size=settings.max_body_bytes)
    app[TRUSTED_PROXIES] = networks(settings.trusted_proxies)
    app[METRICS] = plane.metrics
    app[METRICS_PUBLIC] = settings.metrics_public
    app[GATEWAY] = plane.gateway
    app[GUARD] = plane.guard
    app[MCP] = plane.mcp
    app.add_routes(bind(ep for ep in data_plane.ENDPOINTS if ep is not data_plane.METRICS_TEXT))
    app.add_routes(bind(mcp.PUBLIC))
    sessions: list[aiohttp.ClientSession] = []

    def session() -> aiohttp.ClientSession:
        if not sessions or sessions[0].closed:
            sessions[:] = [main_session(str(main_socket))]
        return sessions[0]

    app.router.add_route("*", "/{tail:.*}", to_main(session))

    async def close(_app: web.Application) -> AsyncIterator[None]:
        yield
        for s in sessions:
            await s.close()

    app.cleanup_ctx.append(close)
    return app


def private_app(plane: DataPlane) -> web.Application:
    """What the main process asks of this worker over its private socket."""

    async def state(_request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(plane.metrics.state()),
                            content_type="application/json")

    async def refresh(_request: web.Request) -> web.Response:
        await plane.refresher.refresh()
        return web.Response(body=orjson.dumps({"revision": plane.refresher.current.revision}),
                            content_type="application/json")

    app = web.Application()
    app.router.add_get("/state", state)
    app.router.add_post("/refresh", refresh)
    return app


async def serve(data_dir: Path, host: str, port: int, index: int, run_dir: Path,
                server_id: str, workers: int, main_pid: int) -> None:
    """Run worker `index` of `workers` of the server whose main process is `main_pid`, until
    SIGTERM or SIGINT."""
    settings = load(data_dir).model_copy(update={"host": host, "port": port, "workers": workers})
    store = await asyncio.to_thread(Store.open, settings.database_url(data_dir))
    clock = SystemClock()
    row = worker_row(server_id, index)
    flight = SharedInFlight(run_dir / IN_FLIGHT, workers, index)
    windows = SharedWindows(run_dir, workers, index)
    tracer = make_tracer(settings.telemetry)  # each process exports its own spans
    # A cold queue written here wakes the main process: this server's keeper (when it leads)
    # places the replica now rather than at its refresher's next look at the store.
    plane = build_plane(store, settings, clock, row, flight=flight, tracer=tracer,
                        windows=windows, on_cold=wake_main(main_pid),
                        answer_file=run_dir / ANSWERS)
    tasks: list[asyncio.Task[None]] = []

    def spawn(coro: Coroutine[Any, Any, None], name: str) -> None:
        tasks.append(asyncio.create_task(coro, name=name))

    async def heartbeats() -> None:
        # The row carries this worker's demand; the leader counts it only while it beats.
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await asyncio.to_thread(store.servers.heartbeat, row, f"worker {index}",
                                        clock.now())
            except Exception as exc:  # the store is down: the next beat tries again
                logger.warning("worker %d heartbeat failed: %s", index, type(exc).__name__)

    raise_open_files_limit()
    await asyncio.to_thread(store.servers.heartbeat, row, f"worker {index}", clock.now())
    await plane.start()  # the first snapshot before the first request
    plane.run(settings, spawn)
    spawn(heartbeats(), "heartbeat")
    public = app_runner(data_plane_app(settings, plane, run_dir / MAIN_SOCKET),
                        edge_limits(settings))
    private = web.AppRunner(private_app(plane), handle_signals=False, access_log=None)
    await public.setup()
    await private.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.UnixSite(private, str(worker_socket(run_dir, index))).start()
        await web.TCPSite(public, host, port, reuse_port=True).start()
        gc.collect()
        gc.freeze()  # as in the main process: no full collections pausing requests
        gc.set_threshold(*GC_THRESHOLDS)
        await stop.wait()
    finally:
        await public.cleanup()  # stop listening; requests in flight get drain_timeout_s
        for task in reversed(tasks):
            task.cancel()
            await asyncio.wait({task})
        await plane.stop()  # the usage left: a clean stop loses none
        try:
            await asyncio.to_thread(store.servers.remove, row)
        except Exception as exc:
            logger.warning("worker %d could not remove its row: %s", index, type(exc).__name__)
        await private.cleanup()
        flight.close()
        windows.close()
        store.close()
        await asyncio.to_thread(tracer.close)  # exports the spans still buffered


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m llmgw.server.worker` (started by the main process only)."""
    p = argparse.ArgumentParser(prog="llmgw-worker", description=__doc__)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--server-id", required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--main-pid", type=int, required=True)
    p.add_argument("--log-level", default="info")
    p.add_argument("--log-format", default="json")
    a = p.parse_args(argv)
    logs.setup(a.log_level, a.log_format)
    coro = serve(a.data_dir, a.host, a.port, a.index, a.run_dir, a.server_id, a.workers,
                 a.main_pid)
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


if __name__ == "__main__":
    main()
