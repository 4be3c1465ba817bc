"""Signing in with a key and out again."""

from __future__ import annotations

from aiohttp import web

from llmgw.api.appkeys import GATEWAY
from llmgw.api.console import render
from llmgw.api.console.access import EXPIRED, SESSIONS, SIGNIN, csrf_token_sent, root
from llmgw.api.console.session import (
    COOKIE,
    PRE_COOKIE,
    PRE_MAX_AGE_S,
    SESSION_MAX_AGE_S,
    clear_cookie,
    set_cookie,
)
from llmgw.core.errors import Forbidden, Unauthenticated

HOME = "/ui/"


async def signin_form(request: web.Request) -> web.Response:
    """The sign-in form, with the CSRF token of a pre-session cookie (made when missing)."""
    sessions = request.app[SESSIONS]
    session = sessions.read(request.cookies.get(COOKIE))
    if session is not None:
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
                           problem=problem)
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
    """End the session in this browser."""
    response = web.Response(status=303, headers={"Location": SIGNIN})
    clear_cookie(request, response, COOKIE)
    return response
