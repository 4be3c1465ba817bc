"""Request ids: taken from `X-Request-Id` when sane, else made; returned on every response
(streams set it themselves before they send their headers: `api.context.response_headers`)
and attached to every log line written while the request is handled."""

from __future__ import annotations

import contextvars
import itertools
import re
import secrets
import time

from aiohttp import web

from llmgw.api.context import REQUEST_ID, SERVER, STARTED

CURRENT_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# A random prefix per process and a counter: unique across servers without a random read per
# request (reading the OS's randomness was 4% of the request path).
_PREFIX = "req-" + secrets.token_hex(4) + "-"
_NEXT = itertools.count(1)


def new_id(given: str) -> str:
    """The request's id: the client's `X-Request-Id` when sane, else a new one."""
    return given if given and _SANE.match(given) else f"{_PREFIX}{next(_NEXT):x}"


def begin(request: web.Request) -> str:
    """Give the request its id and start time (called first thing by the edge middleware)."""
    rid = new_id(request.headers.get("X-Request-Id", ""))
    request[REQUEST_ID] = rid
    request[STARTED] = time.monotonic()
    CURRENT_ID.set(rid)
    return rid


def finish(response: web.StreamResponse, rid: str) -> web.StreamResponse:
    """Put the id (and `Server`) on a response not sent yet (streams carry both from when they
    were prepared)."""
    if not response.prepared:
        headers = response.headers
        headers["X-Request-Id"] = rid
        headers["Server"] = SERVER
    return response
