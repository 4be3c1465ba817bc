"""Request ids: taken from `X-Request-Id` when sane, else made; returned on every response and
attached to every log line written while the request is handled."""

from __future__ import annotations

import contextvars
import re
import secrets
import time

from aiohttp import web

from llmgw.api.errors import Handler
from llmgw.gateway.context import REQUEST_ID, STARTED

CURRENT_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


@web.middleware
async def request_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.headers.get("X-Request-Id", "")
    rid = given if _SANE.match(given) else "req-" + secrets.token_hex(8)
    request[REQUEST_ID] = rid
    request[STARTED] = time.monotonic()
    CURRENT_ID.set(rid)
    return await handler(request)


async def add_header(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: streams are prepared inside handlers, so the header goes on here."""
    rid = request.get(REQUEST_ID)
    if rid:
        response.headers["X-Request-Id"] = rid
