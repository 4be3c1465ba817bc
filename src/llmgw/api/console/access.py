"""Who may reach a console route: the session check, the admin check and the CSRF check, in one
wrapper every route goes through (the route table says which a route needs)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum

from aiohttp import web

from llmgw.api.appkeys import GATEWAY
from llmgw.api.console import render
from llmgw.api.console.session import COOKIE, CSRF_FIELD, CSRF_HEADER, Sessions, clear_cookie
from llmgw.api.console.visitor import VISITOR, Visitor
from llmgw.core.errors import Forbidden, Unauthenticated
from llmgw.core.types import ApiKey

SESSIONS = web.AppKey("console_sessions", Sessions)
# The server's application, whose services the console reads (the console is a sub-application).
ROOT = web.AppKey("console_root", web.Application)
SIGNIN = "/ui/signin"
EXPIRED = "The form expired: reload the page and try again."

PageHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Need(Enum):
    """What a route asks of its visitor."""

    PUBLIC = "public"  # sign-in, static files
    SIGNED = "signed"  # any admin or user key
    ADMIN = "admin"


def root(request: web.Request) -> web.Application:
    """The server's application (services and API endpoints)."""
    return request.app[ROOT]


def visitor(request: web.Request) -> Visitor:
    """The signed-in visitor of a SIGNED or ADMIN route."""
    return request[VISITOR]


async def csrf_token_sent(request: web.Request) -> str | None:
    """The CSRF token a POST carries: the header htmx and fetch send, else the form field."""
    token = request.headers.get(CSRF_HEADER)
    if token is None and request.content_type in ("application/x-www-form-urlencoded",
                                                  "multipart/form-data"):
        value = (await request.post()).get(CSRF_FIELD)
        token = value if isinstance(value, str) else None
    return token


def guarded(need: Need, handler: PageHandler) -> PageHandler:
    """`handler` behind the checks `need` asks for."""
    if need is Need.PUBLIC:
        return handler

    async def checked(request: web.Request) -> web.StreamResponse:
        sessions = request.app[SESSIONS]
        session = sessions.read(request.cookies.get(COOKIE))
        key: ApiKey | None = None
        if session is not None:
            try:
                key = root(request)[GATEWAY].principal(session.key_id)
            except (Unauthenticated, Forbidden):
                key = None  # revoked, expired, or minted beneath a key that is: the session ends
        if session is None or key is None:
            response = render.done(request, SIGNIN)
            if COOKIE in request.cookies:
                clear_cookie(request, response, COOKIE)
            return response
        request[VISITOR] = Visitor(key, sessions.csrf(session.nonce))
        if request.method == "POST" and not sessions.csrf_ok(session.nonce, await csrf_token_sent(request)):
            return render.error(request, 403, EXPIRED)
        if need is Need.ADMIN and not request[VISITOR].admin:
            return render.error(request, 403, "This page needs an admin key.")
        return await handler(request)

    return checked
