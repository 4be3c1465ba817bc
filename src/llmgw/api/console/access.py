"""Who may reach a console route: the session check (a key's, or a person's server-side session),
the admin check and the CSRF check, in one wrapper every route goes through (the route table
says which a route needs). A person's role is checked again by every endpoint a page calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum
from urllib.parse import urlencode

from aiohttp import web

from llmgw.api.appkeys import GATEWAY, PEOPLE
from llmgw.api.console import render
from llmgw.api.console.oidc import OidcClient
from llmgw.api.console.session import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    Session,
    Sessions,
    clear_cookie,
)
from llmgw.api.console.visitor import VISITOR, Visitor
from llmgw.api.context import client_address
from llmgw.core import audit
from llmgw.core.errors import Forbidden, Unauthenticated

SESSIONS = web.AppKey("console_sessions", Sessions)
# The server's application, whose services the console reads (the console is a sub-application).
ROOT = web.AppKey("console_root", web.Application)
SIGNIN = "/ui/signin"
# Where a person's session goes to be renewed at the identity provider (`pages_sso.refresh`).
REFRESH = "/ui/sso/refresh"
# The console's relying party at the identity provider: set only when `[sso]` is.
SSO = web.AppKey("console_sso", OidcClient)
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
        found = await _signed_in(request, session) if session is not None else None
        if isinstance(found, web.StreamResponse):
            return found
        if found is None:
            response = render.done(request, SIGNIN)
            if COOKIE in request.cookies:
                clear_cookie(request, response, COOKIE)
            return response
        request[VISITOR] = found
        assert session is not None  # a visitor comes only from a session
        if request.method == "POST" and not sessions.csrf_ok(session.nonce,
                                                             await csrf_token_sent(request)):
            return render.error(request, 403, EXPIRED)
        if need is Need.ADMIN and not found.admin:
            return render.error(request, 403, "This page needs an admin key or role.")
        if request.method == "POST" and not found.changes:
            # Before the form is even read: a viewer's forged form learns nothing of its fields.
            return render.error(request, 403, "A viewer changes nothing.")
        with audit.from_address(client_address(request)):
            return await handler(request)

    return checked


async def _signed_in(request: web.Request, session: Session) -> Visitor | web.StreamResponse | None:
    """The visitor of a session cookie; a response instead when the person must first renew
    their sign-in or has no role; None when the session is no more."""
    csrf = request.app[SESSIONS].csrf(session.nonce)
    if session.token is None:
        try:
            return Visitor(root(request)[GATEWAY].principal(session.key_id or ""), csrf)
        except (Unauthenticated, Forbidden):
            return None  # revoked, expired, or minted beneath a key that is: the session ends
    people = root(request).get(PEOPLE)
    if people is None or SSO not in request.app:
        return None  # SSO was turned off: people's sessions end with it
    # A change is checked against the store, not this server's cache: a session ended on
    # another server a moment ago changes nothing here.
    visit = await people.resolve(session.token, fresh=request.method not in ("GET", "HEAD"))
    if visit is None:
        return None
    if people.due_refresh(visit):
        if request.method in ("GET", "HEAD"):
            return render.done(request, f"{REFRESH}?{urlencode({'return_to': request.path_qs})}")
        return render.error(request, 401, "Your sign-in needs renewing: reload the page.")
    if visit.person is None:
        return render.page(request, "no_role.html", status=403, csrf=csrf, user=visit.user)
    return Visitor(visit.person.key, csrf, visit.person)
