"""What the HTTP layer attaches to a request for the request path to read."""

from __future__ import annotations

from aiohttp import web

REQUEST_ID = web.RequestKey("request_id", str)
STARTED = web.RequestKey("started", float)  # monotonic time the request arrived
