"""Every console route behind its checks: a session, the CSRF token on every POST, and an admin
key on the admin pages; errors are HTML with the message only."""

from __future__ import annotations

import re

import pytest

from llmgw.api.console.access import Need
from llmgw.api.console.routes import PAGES, Page
from tests.api.console.conftest import Install

SIGNED_IN = [r for r in PAGES if r.need is not Need.PUBLIC]
POSTS = [r for r in SIGNED_IN if r.method == "POST"]
ADMIN = [r for r in PAGES if r.need is Need.ADMIN]


def url(route: Page) -> str:
    """The route's path with its parameters filled in."""
    return "/ui" + re.sub(r"\{(\w+)(:[^}]*)?\}", lambda m: {"action": "cordon"}.get(m.group(1), "x"),
                          route.path)


def rid(route: Page) -> str:
    return f"{route.method} {route.path}"


@pytest.mark.parametrize("route", SIGNED_IN, ids=rid)
async def test_without_a_session_every_page_sends_to_sign_in(install: Install, route: Page) -> None:
    resp = await install.browser.client.request(route.method, url(route), allow_redirects=False,
                                                data={"csrf_token": "x"})
    assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"


@pytest.mark.parametrize("route", POSTS, ids=rid)
async def test_a_post_without_the_csrf_token_is_refused(install: Install, route: Page) -> None:
    await install.browser.signin(install.admin)
    for sent in ({}, {"csrf_token": "0" * 64}):
        resp = await install.browser.post(url(route), sent)
        assert resp.status == 403, await resp.text()
        assert "form expired" in await resp.text()
    # A token in the query string is not one either.
    token = await install.browser.csrf()
    resp = await install.browser.post(url(route) + f"?csrf_token={token}", {})
    assert resp.status == 403


@pytest.mark.parametrize("route", ADMIN, ids=rid)
async def test_a_user_key_gets_a_403_page_on_admin_pages(install: Install, route: Page) -> None:
    user = await install.mint("alice")
    await install.browser.signin(user["key"])
    token = await install.browser.csrf()
    resp = await install.browser.client.request(route.method, url(route), allow_redirects=False,
                                                data={"csrf_token": token})
    assert resp.status == 403
    assert resp.headers["Content-Type"].startswith("text/html")
    text = await resp.text()
    assert "This page needs an admin key or role." in text
    assert 'id="nav"' in text  # still signed in: the page says why, with the user's own nav


async def test_a_user_keys_nav_shows_only_its_pages(install: Install) -> None:
    user = await install.mint("alice")
    await install.browser.signin(user["key"])
    text = await (await install.browser.get("/ui/")).text()
    nav = text.split('<nav id="nav">', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r'href="([^"]+)"', nav) == ["/ui/", "/ui/keys", "/ui/usage", "/ui/playground"]
    admin = await install.new_browser()
    await admin.signin(install.admin)
    text = await (await admin.get("/ui/")).text()
    nav = text.split('<nav id="nav">', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r'href="([^"]+)"', nav) == ["/ui/", "/ui/models", "/ui/nodes", "/ui/guard",
                                                  "/ui/routes", "/ui/teams", "/ui/mcp", "/ui/keys",
                                                  "/ui/usage", "/ui/users", "/ui/playground"]


async def test_every_page_an_admin_opens_renders(install: Install) -> None:
    await install.browser.signin(install.admin)
    for route in PAGES:
        if route.method != "GET" or "{" in route.path or route.need is Need.PUBLIC:
            continue
        resp = await install.browser.get(url(route))
        assert resp.status == 200, (route.path, await resp.text())


def route_pattern(route: Page) -> re.Pattern[str]:
    """A regex for the URLs `route` answers ({name:.+} takes slashes, {id} does not)."""
    def param(m: re.Match[str]) -> str:
        return ".+" if m.group(2) else "[^/]+"

    return re.compile("^/ui" + re.sub(r"\{(\w+)(:[^}]*)?\}", param, route.path) + "$")


async def test_every_form_on_every_page_carries_the_token_and_posts_to_a_route(install: Install) -> None:
    status, _ = await install.api("POST", "/admin/v1/models", {
        "name": "org/m", "source": {"kind": "remote", "base_url": "https://api.example.com/v1"}})
    assert status == 201
    status, _ = await install.api("PUT", "/admin/v1/guard/policies/p1", {"judges": ["qwen3guard-0.6b"]})
    assert status == 200
    await install.browser.signin(install.admin)
    seen = 0
    posts = [route_pattern(r) for r in PAGES if r.method == "POST"]
    pages = [url(r) for r in PAGES if r.method == "GET" and "{" not in r.path and r.need is not Need.PUBLIC]
    for path in [*pages, "/ui/models/org/m", "/ui/guard/policies/p1"]:
        resp = await install.browser.get(path)
        assert resp.status == 200, path
        page = await resp.text()
        targets = re.findall(r'hx-post="([^"]+)"', page)
        for form in re.findall(r"<form[^>]*>.*?</form>", page, re.S):
            if 'method="post"' in form:
                assert 'name="csrf_token"' in form, (path, form[:120])
                targets += re.findall(r'^<form[^>]*action="([^"]+)"', form)
        for target in targets:
            assert any(p.match(target) for p in posts), (path, target)
        seen += len(targets)
    assert seen > 20  # the forms and buttons were found: the check is not vacuous


async def test_the_root_sends_a_browser_to_the_console_and_tells_a_client_where_things_are(
        install: Install) -> None:
    page = await install.browser.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status == 302 and page.headers["Location"] == "/ui/"
    answer = await install.browser.get("/", headers={"Accept": "application/json"})
    assert answer.status == 404
    error = (await answer.json())["error"]
    assert error["type"] == "invalid_request_error"
    assert "/v1/" in error["message"] and "/admin/v1/" in error["message"] and "/ui/" in error["message"]
