"""The console's response headers and its error pages: every `/ui` response carries the strict
headers, every failure is an HTML page with its message only."""

from __future__ import annotations

import logging

from aiohttp import web

from llmgw.api.console import render
from llmgw.api.errors import Handler
from llmgw.core.errors import LlmgwError

logger = logging.getLogger(__name__)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
STATIC_PREFIX = "/ui/static/"

_MESSAGES = {
    404: "There is no such page.",
    405: "That method is not allowed here.",
    413: "The form is too large.",
}


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the security headers on every response, streams and files too; pages
    are never stored (one of them shows a new key's secret)."""
    response.headers.update(HEADERS)
    if not request.path.startswith(STATIC_PREFIX):
        response.headers["Cache-Control"] = "no-store"
    else:
        response.headers.setdefault("Cache-Control", "no-cache")


@web.middleware
async def html_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure under /ui as an HTML page (message only): never JSON, never a traceback."""
    try:
        return await handler(request)
    except LlmgwError as exc:
        if exc.status >= 500:
            logger.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc.message)
        return render.error(request, exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return render.error(request, exc.status, _MESSAGES.get(exc.status, exc.reason))
    except ConnectionError:
        raise
    except Exception:
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return render.error(request, 500, "Internal server error.")
