"""Signing in with a key (break-glass when single sign-on is set up) and out again."""

from __future__ import annotations

from aiohttp import web

from llmgw.api.appkeys import GATEWAY, PEOPLE
from llmgw.api.console import render
from llmgw.api.console.access import EXPIRED, SESSIONS, SIGNIN, SSO, csrf_token_sent, root
from llmgw.api.console.session import (
    COOKIE,
    PRE_COOKIE,
    PRE_MAX_AGE_S,
    SESSION_MAX_AGE_S,
    clear_cookie,
    set_cookie,
)
from llmgw.api.context import client_address
from llmgw.core.errors import Forbidden, RateLimited, Unauthenticated

HOME = "/ui/"


async def signin_form(request: web.Request) -> web.Response:
    """The sign-in form, with the CSRF token of a pre-session cookie (made when missing)."""
    sessions = request.app[SESSIONS]
    session = sessions.read(request.cookies.get(COOKIE))
    if session is not None and session.key_id is not None:
        try:
            root(request)[GATEWAY].principal(session.key_id)
            return render.done(request, HOME)
        except (Unauthenticated, Forbidden):
            pass
    return _form(request, None)


def _form(request: web.Request, problem: str | None, status: int = 200) -> web.Response:
    sessions = request.app[SESSIONS]
    nonce = sessions.read_pre(request.cookies.get(PRE_COOKIE))
    fresh = None
    if nonce is None:
        fresh, nonce = sessions.issue_pre()
    response = render.page(request, "signin.html", status=status, csrf=sessions.csrf(nonce),
                           problem=problem, sso=SSO in request.app)
    if fresh is not None:
        set_cookie(request, response, PRE_COOKIE, fresh, PRE_MAX_AGE_S)
    return response


async def signin(request: web.Request) -> web.Response:
    """Check the key as the API would; on success a session cookie and 303 to the overview. The
    key is read from the form body only and never written back."""
    sessions = request.app[SESSIONS]
    nonce = sessions.read_pre(request.cookies.get(PRE_COOKIE))
    if nonce is None or not sessions.csrf_ok(nonce, await csrf_token_sent(request)):
        return render.error(request, 403, EXPIRED)
    try:
        await root(request)[PEOPLE].attempt(client_address(request))
    except RateLimited as exc:
        response = _form(request, exc.message, 429)
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    form = await request.post()
    secret = form.get("key")
    if not isinstance(secret, str) or not secret.strip():
        return _form(request, "Enter a key.", 400)
    try:
        key = root(request)[GATEWAY].authenticate("Bearer " + secret.strip())
    except Unauthenticated as exc:
        return _form(request, exc.message + ".", 401)
    except Forbidden:
        return _form(request, "This key cannot sign in to the console: use an admin or user key.", 403)
    response = web.Response(status=303, headers={"Location": HOME})
    set_cookie(request, response, COOKIE, sessions.issue(key.id), SESSION_MAX_AGE_S)
    clear_cookie(request, response, PRE_COOKIE)
    return response


async def signout(request: web.Request) -> web.Response:
    """End the session: a key's in this browser; a person's everywhere (its server-side session
    is ended, so the cookie is refused wherever it is shown again). Open to a person without a
    role too, so it checks the session's CSRF token itself."""
    sessions = request.app[SESSIONS]
    session = sessions.read(request.cookies.get(COOKIE))
    if session is None:
        return render.done(request, SIGNIN)
    if not sessions.csrf_ok(session.nonce, await csrf_token_sent(request)):
        return render.error(request, 403, EXPIRED)
    if session.token is not None:
        people = root(request)[PEOPLE]
        visit = await people.resolve(session.token, fresh=True)
        if visit is not None:
            await people.end(visit, "signed out", client_address(request))
    response = render.done(request, SIGNIN)
    clear_cookie(request, response, COOKIE)
    return response
