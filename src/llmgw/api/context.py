"""What the HTTP layer attaches to a request for the request path to read."""

from __future__ import annotations

from aiohttp import web

REQUEST_ID = web.RequestKey("request_id", str)
STARTED = web.RequestKey("started", float)  # monotonic time the request arrived
# What every response says in `Server`: no Python or aiohttp version for a scanner to match.
SERVER = "llmgw"


def response_headers(request: web.Request, headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the request id and `Server`, for responses the request path prepares itself."""
    rid = request.get(REQUEST_ID)
    return {**headers, "Server": SERVER, "X-Request-Id": rid} if rid else {**headers, "Server": SERVER}
