"""Signing in through the identity provider: off to it (`start`), back from it (`callback`),
and the silent renewal of a signed-in session (`refresh`).

The flow (state, nonce, PKCE verifier, where to go after) rides in a signed cookie of its own
while the browser is at the provider. That cookie is SameSite=Lax, as the provider's redirect
back is a navigation from another site; the session cookie stays Strict, so the callback sends
the browser on with a page of its own (a same-site navigation, which carries it) rather than a
redirect from the provider's chain.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.api.appkeys import PEOPLE
from llmgw.api.console import render
from llmgw.api.console.access import SESSIONS, SIGNIN, SSO, root
from llmgw.api.console.oidc import safe_return_to
from llmgw.api.console.session import (
    COOKIE,
    FLOW_COOKIE,
    FLOW_MAX_AGE_S,
    PATH,
    clear_cookie,
    set_cookie,
)
from llmgw.api.context import client_address, over_https
from llmgw.core.errors import IdentityProviderUnavailable, RateLimited, SignInRefused


async def start(request: web.Request) -> web.StreamResponse:
    """Off to the provider's sign-in page (one sign-in attempt of this address)."""
    client = request.app.get(SSO)
    if client is None:
        return render.error(request, 404, "Single sign-on is not set up on this install.")
    try:
        await root(request)[PEOPLE].attempt(client_address(request))
        url, flow = await client.begin(request.query.get("return_to"))
    except RateLimited as exc:
        return _retry_later(request, exc)
    except IdentityProviderUnavailable as exc:
        return render.error(request, 502, exc.message + ": try again later.")
    return _to_provider(request, url, request.app[SESSIONS].issue_flow(flow))


async def refresh(request: web.Request) -> web.StreamResponse:
    """Ask the provider, without a page, whether the signed-in person may still sign in. Only a
    live session is renewed, and each renewal is a sign-in attempt of this address: otherwise
    anyone could send the provider flows in this install's name, past `signin_per_minute`."""
    client = request.app.get(SSO)
    current = request.app[SESSIONS].read(request.cookies.get(COOKIE))
    people = root(request)[PEOPLE]
    if client is None or current is None or await people.resolve(current.token) is None:
        return render.done(request, SIGNIN)
    try:
        await people.attempt(client_address(request))
        url, flow = await client.begin(request.query.get("return_to"), silent=True)
    except RateLimited as exc:
        return _retry_later(request, exc)
    except IdentityProviderUnavailable as exc:
        return render.error(request, 502, exc.message + ": try again later.")
    return _to_provider(request, url, request.app[SESSIONS].issue_flow(flow))


def _to_provider(request: web.Request, url: str, flow_cookie: str) -> web.StreamResponse:
    response = web.Response(status=303, headers={"Location": url, "Cache-Control": "no-store"})
    response.set_cookie(FLOW_COOKIE, flow_cookie, max_age=FLOW_MAX_AGE_S, path=PATH,
                        httponly=True, samesite="Lax", secure=over_https(request))
    return response


async def callback(request: web.Request) -> web.StreamResponse:
    """Back from the provider: the code exchanged, the ID token checked, the person signed in
    (or their session renewed), the flow cookie spent."""
    sessions, people, client = request.app[SESSIONS], root(request)[PEOPLE], request.app.get(SSO)
    if client is None:
        return render.error(request, 404, "Single sign-on is not set up on this install.")
    flow = sessions.read_flow(request.cookies.get(FLOW_COOKIE))
    current = sessions.read(request.cookies.get(COOKIE))
    visit = await people.resolve(current.token, fresh=True) \
        if current is not None and current.token else None
    q = request.query
    try:
        who = await client.finish(flow, q.get("state"), q.get("code"), q.get("error"))
        if flow is not None and flow.silent:
            if visit is None:
                raise SignInRefused("this browser's session has ended: sign in again")
            await people.refreshed(visit, who, client_address(request))
            response = _onward(request, flow.return_to)
        else:
            if visit is not None:  # signing in again replaces the session this browser had
                await people.end(visit, "signed in again", client_address(request))
            token, _ = await people.sign_in(who, client_address(request))
            response = _onward(request, flow.return_to if flow else "/ui/")
            set_cookie(request, response, COOKIE, sessions.issue_person(token),
                       int(people.max_age_s))
    except SignInRefused as exc:
        response = render.page(request, "signin.html", status=401, problem=exc.message + ".",
                               csrf="", sso=True)
        if flow is not None and flow.silent and visit is not None:
            # The provider no longer signs this person in (removed, or signed out there).
            await people.end(visit, "refused at renewal", client_address(request))
            clear_cookie(request, response, COOKIE)
        # Otherwise the browser's session stays: a forged or stale callback (a link anyone can
        # send) must not sign its victim out.
    except IdentityProviderUnavailable as exc:
        response = render.error(request, 502, exc.message + ": try again later.")
    response.del_cookie(FLOW_COOKIE, path=PATH, secure=over_https(request), httponly=True,
                        samesite="Lax")
    return response


def _onward(request: web.Request, return_to: str) -> web.Response:
    """A page that moves the browser on to `return_to` by itself (a same-site navigation, so
    the Strict session cookie goes with it)."""
    return render.page(request, "onward.html", target=safe_return_to(return_to))


def _retry_later(request: web.Request, exc: RateLimited) -> web.Response:
    response = render.error(request, 429, exc.message)
    response.headers["Retry-After"] = str(exc.retry_after_s)
    return response

