"""Signing in and out of the console through the real app: the cookie, its life, its CSRF token,
and the key never written back anywhere."""

from __future__ import annotations

import base64
import json
import ssl
import time
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from llmgw.api.console.session import COOKIE, SESSION_MAX_AGE_S, Sessions, console_secret, set_cookie
from tests.api.console.conftest import Browser, Install, csrf_of, open_install


def cookie_header(resp_headers: list[str], name: str) -> str:
    found = [h for h in resp_headers if h.startswith(name + "=")]
    assert found, f"no {name} cookie set"
    return found[0]


async def test_signing_in_sets_a_strict_http_only_cookie_for_eight_hours(install: Install) -> None:
    resp = await install.browser.signin(install.admin)
    assert resp.status == 303 and resp.headers["Location"] == "/ui/"
    header = cookie_header(resp.headers.getall("Set-Cookie"), COOKIE)
    morsel = SimpleCookie(header)[COOKIE]
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["path"] == "/ui"
    assert morsel["max-age"] == str(SESSION_MAX_AGE_S) == "28800"
    assert not morsel["secure"]  # plain http here: a Secure cookie would never come back
    assert install.admin not in header
    page = await install.browser.get("/ui/")
    assert page.status == 200
    assert 'id="whoami"' in await page.text()


def test_the_cookie_is_secure_when_the_request_came_over_https() -> None:
    request = make_mocked_request("POST", "/ui/signin", sslcontext=ssl.create_default_context())
    response = web.Response()
    set_cookie(request, response, COOKIE, "v", 60)
    assert response.cookies[COOKIE]["secure"] is True


async def test_the_key_is_never_in_a_page_a_url_or_a_cookie(install: Install) -> None:
    form = await install.browser.get("/ui/signin")
    token = csrf_of(await form.text())
    resp = await install.browser.client.post("/ui/signin", data={"key": install.admin, "csrf_token": token})
    assert resp.status == 200  # followed the redirect to the overview
    assert install.admin not in str(resp.url) and all(install.admin not in str(h.url) for h in resp.history)
    assert install.admin not in await resp.text()
    for h in resp.history:
        assert install.admin not in str(dict(h.headers))
    for path in ("/ui/", "/ui/live/overview"):
        assert install.admin not in await (await install.browser.get(path)).text()


async def test_a_key_in_the_query_signs_nobody_in(install: Install) -> None:
    resp = await install.browser.get(f"/ui/signin?key={install.admin}")
    assert resp.status == 200
    assert install.admin not in await resp.text()
    assert COOKIE not in {c.key for c in install.browser.client.session.cookie_jar}
    assert (await install.browser.get("/ui/")).headers["Location"] == "/ui/signin"


async def test_a_wrong_key_shows_the_form_again_with_an_error_and_nothing_echoed(install: Install) -> None:
    wrong = "sk-llmgw-not-a-real-key-0123456789"
    resp = await install.browser.signin(wrong)
    assert resp.status == 401
    text = await resp.text()
    assert 'id="signin-error"' in text and 'id="signin"' in text
    assert wrong not in text
    assert (await install.browser.get("/ui/")).status == 303


@pytest.mark.parametrize("scope", ["node", "metrics"])
async def test_a_node_join_token_or_a_metrics_key_cannot_sign_in(install: Install, scope: str) -> None:
    token = (await install.mint(f"{scope}-a", scope=scope))["key"]
    resp = await install.browser.signin(token)
    assert resp.status == 403
    assert 'id="signin-error"' in await resp.text()
    assert (await install.browser.get("/ui/")).status == 303  # still signed out


async def test_signing_in_without_the_forms_csrf_token_is_refused(install: Install) -> None:
    await install.browser.get("/ui/signin")  # the pre-session cookie, but no token sent
    resp = await install.browser.post("/ui/signin", {"key": install.admin})
    assert resp.status == 403
    assert "form expired" in await resp.text()
    # Nor with a token from another browser's form.
    other = await install.new_browser()
    stolen = csrf_of(await (await other.get("/ui/signin")).text())
    resp = await install.browser.post("/ui/signin", {"key": install.admin, "csrf_token": stolen})
    assert resp.status == 403
    assert (await install.browser.get("/ui/")).status == 303


async def test_pages_need_a_session(install: Install) -> None:
    for path in ("/ui/", "/ui/live/overview"):
        resp = await install.browser.get(path)
        assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"
    # htmx polling a fragment after the session ended is sent to the sign-in page.
    resp = await install.browser.get("/ui/live/overview", headers={"HX-Request": "true"})
    assert resp.headers["HX-Redirect"] == "/ui/signin"


async def test_an_expired_session_is_refused(install: Install) -> None:
    # A cookie signed with the install's own secret, nine hours ago.
    key_id = (await install.mint("old"))["id"]
    nine_hours_ago = Sessions(console_secret(install.settings.key_secret), lambda: time.time() - 9 * 3600)
    install.browser.set_cookie(COOKIE, nine_hours_ago.issue(key_id))
    resp = await install.browser.get("/ui/")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"
    # Signed just now with the same secret, the same id is let in: only the age differed.
    fresh = Sessions(console_secret(install.settings.key_secret)).issue(key_id)
    install.browser.set_cookie(COOKIE, fresh)
    assert (await install.browser.get("/ui/")).status == 200


async def test_a_tampered_cookie_is_refused(install: Install) -> None:
    user = await install.mint("alice")
    await install.browser.signin(user["key"])
    jar = install.browser.client.session.cookie_jar
    value = next(c.value for c in jar if c.key == COOKIE)
    admin_id = next(k["id"] for k in (await install.api("GET", "/admin/v1/keys"))[1]["data"]
                    if k["scope"] == "admin")
    # The admin key's id with the user's signature, and a signature changed by one character:
    # the first, as the last base64 character carries bits the decoder drops (changing only
    # those leaves the same signature bytes).
    payload, stamp, signature = value.split(".")
    swapped = base64.urlsafe_b64encode(json.dumps({"k": admin_id, "n": "x"}).encode()).rstrip(b"=").decode()
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    for forged in (f"{swapped}.{stamp}.{signature}", f"{payload}.{stamp}.{flipped}"):
        install.browser.set_cookie(COOKIE, forged)
        resp = await install.browser.get("/ui/")
        assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"


@pytest.mark.parametrize("revoke", ["itself", "its minter"])
async def test_revoking_the_key_ends_its_sessions(install: Install, revoke: str) -> None:
    parent = await install.mint("parent")
    child = await install.mint("child", parent["key"])
    await install.browser.signin(child["key"])
    assert (await install.browser.get("/ui/")).status == 200
    target = child if revoke == "itself" else parent
    status, _ = await install.api("POST", f"/admin/v1/keys/{target['id']}/revoke")
    assert status == 200
    resp = await install.browser.get("/ui/")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"


async def test_signing_out_needs_the_csrf_token_and_then_clears_the_cookie(install: Install) -> None:
    await install.browser.signin(install.admin)
    for sent in ({}, {"csrf_token": "0" * 64}):
        resp = await install.browser.post("/ui/signout", sent)
        assert resp.status == 403
        assert "form expired" in await resp.text()
    assert (await install.browser.get("/ui/")).status == 200  # still signed in
    token = await install.browser.csrf()
    resp = await install.browser.post("/ui/signout", {"csrf_token": token})
    assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"
    assert (await install.browser.get("/ui/")).status == 303


async def test_another_sessions_csrf_token_is_refused(install: Install) -> None:
    await install.browser.signin(install.admin)
    other = await install.new_browser()
    await other.signin(install.admin)
    theirs = await other.csrf()
    resp = await install.browser.post("/ui/signout", headers={"X-CSRF-Token": theirs})
    assert resp.status == 403
    mine = await install.browser.csrf()
    resp = await install.browser.post("/ui/signout", headers={"X-CSRF-Token": mine})
    assert resp.status == 303


async def test_the_console_is_off_when_the_install_says_so(tmp_path: Path) -> None:
    server, *_ = await open_install(tmp_path, ui=False)
    async with TestClient(server) as client:
        resp = await Browser(client).get("/ui/signin")
        assert resp.status == 404
