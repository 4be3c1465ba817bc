"""`python -m llmgw.api.mcp_bridge`: a stdio MCP server served as streamable HTTP on a node.

A node agent runs one bridge per stdio server (`node.mcp_runs`) and supervises it as it does an
engine; the bridge runs the server's command as its child (`node.mcp_stdio`) and answers MCP's
streamable HTTP on `POST /mcp` with plain JSON, one answer per request: the child's state is the
child's, so any server or worker of the install may call it. Only llmgw may: every call carries
the node's engine key (`Authorization: Bearer`), which the agent gives the bridge in its
environment (`LLMGW_ENGINE_KEY`) and the child never sees. `GET /healthz` answers 200 once the
child made its handshake. The bridge ends when its child does, as the child ended (so the
agent's words for the crash are the child's), and takes the child along when it is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from llmgw.core.engine_command import KEY_ENV
from llmgw.core.errors import UpstreamError, UpstreamTimeout
from llmgw.node.mcp_stdio import BRIDGE_ENV, HEALTH_PATH, MCP_PATH, StdioMcp

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
_MUX = web.AppKey("mux", StdioMcp)
_KEY = web.AppKey("key", str)
_TIMEOUT = web.AppKey("timeout", float)


def _rpc_error(id_: Any, code: int, message: str, status: int = 200,
               headers: dict[str, str] | None = None) -> web.Response:
    body = {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}
    return web.Response(body=orjson.dumps(body), status=status, headers=headers,
                        content_type="application/json")


def _answer(message: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(message), content_type="application/json")


async def handle_mcp(request: web.Request) -> web.Response:
    """One JSON-RPC message: a request answered with the child's answer, anything else 202."""
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {request.app[_KEY]}".encode()):
        return _rpc_error(None, -32001, "unauthorized", 401, {"WWW-Authenticate": "Bearer"})
    try:
        message = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _rpc_error(None, -32700, "parse error", 400)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _rpc_error(None, -32600, "one JSON-RPC 2.0 message per request", 400)
    mux, method = request.app[_MUX], message.get("method")
    if not isinstance(method, str):
        return web.Response(status=202)  # a client's answer to a request the child never gets
    if "id" not in message:
        if method != "notifications/initialized":  # the bridge made the handshake itself
            with contextlib.suppress(UpstreamError):
                await mux.notify(message)
        return web.Response(status=202)
    if method == "initialize":
        return _answer({"jsonrpc": "2.0", "id": message["id"], "result": mux.initialized})
    if method == "server/discover":
        # The child is in the handshake era the bridge opened; callers use it too.
        return _rpc_error(message["id"], -32601, "method not found")
    try:
        return _answer(await mux.request(message, request.app[_TIMEOUT]))
    except UpstreamTimeout as exc:
        return _rpc_error(message["id"], -32001, exc.message)
    except UpstreamError as exc:
        return _rpc_error(message["id"], -32603, exc.message, 502)


async def not_allowed(_request: web.Request) -> web.Response:
    """No server-initiated stream and no session to delete: every answer comes with its POST."""
    return web.Response(status=405, headers={"Allow": "POST"})


async def healthz(request: web.Request) -> web.Response:
    ok = request.app[_MUX].alive
    return web.json_response({"ok": ok}, status=200 if ok else 503)


def make_app(mux: StdioMcp, key: str, timeout_s: float) -> web.Application:
    """The bridge's routes in front of a started `mux`."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[_MUX], app[_KEY], app[_TIMEOUT] = mux, key, timeout_s
    app.router.add_post(MCP_PATH, handle_mcp)
    app.router.add_get(MCP_PATH, not_allowed)
    app.router.add_delete(MCP_PATH, not_allowed)
    app.router.add_get(HEALTH_PATH, healthz)
    return app


async def serve(argv: list[str], host: str, port: int, key: str, env: dict[str, str],
                log_path: Path, timeout_s: float, start_timeout_s: float) -> int:
    """Run the child and serve it until it ends or the bridge is told to stop (SIGTERM,
    SIGINT); the child's exit status (-N: signal N), 0 when stopped."""
    mux = StdioMcp(argv, env, log_path)
    await mux.start(start_timeout_s)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(make_app(mux, key, timeout_s), access_log=None)
    await runner.setup()
    ended = asyncio.ensure_future(mux.wait())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await web.TCPSite(runner, host, port).start()
        logger.info("serving MCP server pid %s on http://%s:%d%s", mux.pid, host, port, MCP_PATH)
        await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        await runner.cleanup()
        await mux.close()
        code = await ended
    if stop.is_set():
        return 0
    logger.error("the MCP server's process ended (%s)",
                 f"signal {-code}" if code < 0 else f"exit status {code}")
    return code


def main(args: list[str] | None = None) -> None:
    """Entry point: `python -m llmgw.api.mcp_bridge --host H --port P --log FILE -- COMMAND…`."""
    p = argparse.ArgumentParser(prog="llmgw-mcp-bridge", description=__doc__)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", type=Path, required=True, help="where the child's stderr goes")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a call may take")
    p.add_argument("--start-timeout", type=float, default=60.0,
                   help="seconds the child may take to answer initialize")
    p.add_argument("command", nargs="+")
    a = p.parse_args(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s llmgw-mcp-bridge %(levelname)s %(message)s")
    key = os.environ.pop(KEY_ENV, "")
    env = orjson.loads(os.environ.pop(BRIDGE_ENV, "{}"))
    if not key:
        logger.error("%s is not set: the bridge serves only callers holding the node's key",
                     KEY_ENV)
        sys.exit(2)
    try:
        code = asyncio.run(serve(a.command, a.host, a.port, key, env, a.log, a.timeout,
                                 a.start_timeout))
    except UpstreamError as exc:
        logger.error("the MCP server did not start: %s", exc.message)
        sys.exit(1)
    if code < 0:
        # Die as the child did, so the agent names the same signal.
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot be caught anyway
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
