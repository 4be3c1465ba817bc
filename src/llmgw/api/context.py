"""What the HTTP layer attaches to a request for the request path to read."""

from __future__ import annotations

import socket

from aiohttp import web

REQUEST_ID = web.RequestKey("request_id", str)
STARTED = web.RequestKey("started", float)  # monotonic time the request arrived
# What every response says in `Server`: no Python or aiohttp version for a scanner to match.
SERVER = "llmgw"


def response_headers(request: web.Request, headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the request id and `Server`, for responses the request path prepares itself."""
    rid = request.get(REQUEST_ID)
    return {**headers, "Server": SERVER, "X-Request-Id": rid} if rid else {**headers, "Server": SERVER}


# What an extra worker adds when it passes a request to the main process (`api.forward`): the
# client's address, which the main process would otherwise see only as its private socket.
RELAYED_FOR = "X-Llmgw-Relayed-For"


def client_address(request: web.Request) -> str:
    """The client's address, as sign-in limits and the audit log name it: the relaying worker's
    word for a request that came over the main process's private socket (only a worker can
    reach it), the connection's peer for any other; a client's own header is never believed."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None and sock.family == socket.AF_UNIX:
        return request.headers.get(RELAYED_FOR) or "unknown"
    return request.remote or "unknown"
