"""Signing in to the console through a real OpenID provider: each role sees and may do what it
should, sessions end everywhere, renewals take the provider's word, and every forged or
replayed part of the flow is refused without a 500."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from llmgw.api.console.session import FLOW_COOKIE
from tests.api.console.conftest import csrf_of
from tests.api.console.sso import (
    ACCOUNTS,
    NOBODY,
    OPERATOR,
    TEAM_ADMIN,
    VIEWER,
    SsoInstall,
    open_sso_install,
    provider,
    sso,
    sso_port,
)
from tests.support.oidc_provider import ADMIN, Account, OidcProvider

__all__ = ["provider", "sso", "sso_port"]  # fixtures

WHOAMI = re.compile(r'<span id="whoami">([^<]*)<span class="badge">([^<]*)</span>')


def whoami(html: str) -> tuple[str, str]:
    found = WHOAMI.search(html)
    assert found, "the page names nobody signed in"
    return found.group(1).strip(), found.group(2)


async def test_an_admin_signs_in_through_the_provider_and_lands_where_they_were_going(
        sso: SsoInstall) -> None:
    person = await sso.person(ADMIN)
    # An unsigned browser is sent to sign in; the page offers the provider and keeps the key form.
    assert (await person.console.get("/ui/models")).headers["Location"] == "/ui/signin"
    page = await (await person.console.get("/ui/signin")).text()
    assert 'id="sso-start"' in page and 'id="signin-key"' in page
    onward = await person.sign_in(return_to="/ui/models")
    assert onward.status == 200
    assert '<meta http-equiv="refresh" content="0;url=/ui/models">' in await onward.text()
    models = await person.console.get("/ui/models")
    assert models.status == 200
    assert whoami(await models.text()) == ("alice@example.test", "admin")
    [user] = sso.install.store.users.list()
    assert (user.email, str(user.grant), user.role_source) == ("alice@example.test", "admin",
                                                               "provider")
    signed = [e for e in sso.install.store.audit.entries() if e.action == "sign-in"]
    assert [(e.by, e.address) for e in signed] == [("alice@example.test (sso)", "127.0.0.1")]


@pytest.mark.parametrize(("account", "shown", "hidden"), [
    (ADMIN, ["/ui/models", "/ui/keys", "/ui/users", "/ui/playground"], []),
    (OPERATOR, ["/ui/models", "/ui/nodes", "/ui/guard", "/ui/playground"],
     ["/ui/keys", "/ui/usage", "/ui/users"]),
    (VIEWER, ["/ui/models", "/ui/nodes"], ["/ui/keys", "/ui/usage", "/ui/users", "/ui/playground"]),
    (TEAM_ADMIN, ["/ui/keys", "/ui/usage", "/ui/playground"], ["/ui/models", "/ui/nodes", "/ui/users"]),
])
async def test_each_role_is_shown_its_pages(sso: SsoInstall, account: object, shown: list[str],
                                            hidden: list[str]) -> None:
    person = await sso.signed_in(ACCOUNTS[account.sub])  # type: ignore[attr-defined]
    html = await (await person.console.get("/ui/")).text()
    nav = re.findall(r'href="([^"]+)"', html.split('<nav id="nav">', 1)[1].split("</nav>", 1)[0])
    assert set(shown) <= set(nav) and not set(hidden) & set(nav)


async def test_a_viewers_forged_form_is_refused_by_the_server(sso: SsoInstall) -> None:
    person = await sso.signed_in(VIEWER)
    token = await person.console.csrf("/ui/models")
    forged = {"csrf_token": token, "name": "mine", "scope": "user"}
    resp = await person.console.post("/ui/keys", forged)
    assert resp.status == 403
    assert "A viewer changes nothing." in await resp.text()
    resp = await person.console.post("/ui/models/gemma3-270m/scale",
                                     {"csrf_token": token, "min": "0", "max": "3"})
    assert resp.status == 403
    assert "A viewer changes nothing." in await resp.text()
    assert sso.install.store.keys.list()[0].name == "admin"  # nothing was made
    assert len(sso.install.store.keys.list()) == 1


async def test_an_operator_changes_models_but_never_keys(sso: SsoInstall) -> None:
    person = await sso.signed_in(OPERATOR)
    token = await person.console.csrf("/ui/models")
    resp = await person.console.post("/ui/models/add", {
        "csrf_token": token, "name": "remote-one", "kind": "remote",
        "base_url": "https://api.example.test/v1", "model": "m", "api_key_env": "LLMGW_PROVIDER_X"})
    assert resp.status in (200, 303), await resp.text()
    assert any(m.name == "remote-one" for m in sso.install.store.catalog.list())
    assert (await person.console.get("/ui/keys")).status == 403
    entry = next(e for e in sso.install.store.audit.entries() if e.target == "remote-one")
    assert (entry.by, entry.address) == ("olga@example.test (sso)", "127.0.0.1")


async def test_a_team_admin_makes_keys_for_its_team_only(sso: SsoInstall) -> None:
    install = sso.install
    for team in ("research", "sales"):
        status, body = await install.api("POST", "/admin/v1/teams",
                                         {"name": team, "limits": {"rpm": 100}})
        assert status == 201, body
    other = await install.mint("sales-key", team="sales")
    person = await sso.signed_in(TEAM_ADMIN)
    token = await person.console.csrf("/ui/keys")
    made = await person.console.post("/ui/keys", {"csrf_token": token, "name": "r1", "rpm": "50"})
    assert made.status == 200
    secret = re.search(r"llmgw-[A-Za-z0-9_-]{20,}", await made.text())
    assert secret, "the new key is shown once"
    key = next(k for k in install.store.keys.list() if k.name == "r1")
    assert (key.team, key.limits.rpm, key.minted_by, key.by) == ("research", 50, None,
                                                                "tara@example.test (sso)")
    # Limits above the team's are refused; another team's key is as unknown as a missing one.
    over = await person.console.post("/ui/keys", {"csrf_token": token, "name": "r2", "rpm": "500"})
    assert over.status == 403 and "limits above team research" in await over.text()
    page = await (await person.console.get("/ui/keys")).text()
    assert "sales-key" not in page and "r1" in page
    revoke = await person.console.post(f"/ui/keys/{other['id']}/revoke", {"csrf_token": token})
    assert revoke.status == 404
    assert not next(k for k in install.store.keys.list() if k.name == "sales-key").revoked
    usage = await person.console.get("/ui/usage")
    assert usage.status == 200 and "sales-key" not in await usage.text()
    mine = await person.console.post(f"/ui/keys/{key.id}/revoke", {"csrf_token": token})
    assert mine.status in (200, 303)
    assert next(k for k in install.store.keys.list() if k.name == "r1").revoked


async def test_a_person_without_a_role_is_told_so_and_can_sign_out(sso: SsoInstall) -> None:
    person = await sso.signed_in(NOBODY)
    page = await person.console.get("/ui/")
    assert page.status == 403
    html = await page.text()
    assert 'id="no-role"' in html and "nina@example.test" in html
    out = await person.console.post("/ui/signout", {"csrf_token": csrf_of(html)})
    assert out.status == 303 and out.headers["Location"] == "/ui/signin"


async def test_a_cookie_reused_after_sign_out_is_refused(sso: SsoInstall) -> None:
    person = await sso.signed_in(ADMIN)
    cookie = person.console.client.session.cookie_jar.filter_cookies(
        person.console.client.make_url("/ui/"))["llmgw_console"].value
    token = await person.console.csrf()
    out = await person.console.post("/ui/signout", {"csrf_token": token})
    assert out.status == 303
    thief = await sso.install.new_browser()
    thief.set_cookie("llmgw_console", cookie)
    resp = await thief.get("/ui/models")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"
    [session] = sso.install.store.sessions.list()
    assert session.end_reason == "signed out"


async def test_an_admin_ends_a_users_sessions_and_demotes_them(sso: SsoInstall) -> None:
    install = sso.install
    alice = await sso.signed_in(ADMIN)
    assert (await alice.console.get("/ui/users")).status == 200
    users = {u.email: u for u in install.store.users.list()}
    status, body = await install.api("PUT", f"/admin/v1/users/{users['alice@example.test'].id}/role",
                                     {"role": "viewer"})
    assert status == 200 and body["role"] == "viewer" and body["role_source"] == "admin"
    role = next(e for e in install.store.audit.entries() if e.action == "role")
    assert (role.by.startswith("admin ("), role.address) == (True, "127.0.0.1")
    page = await alice.console.get("/ui/users")
    assert page.status == 403  # the next page takes the new role
    status, body = await install.api("POST", "/admin/v1/users/alice@example.test/signout")
    assert (status, body["ended"]) == (200, 1)
    assert (await alice.console.get("/ui/")).headers["Location"] == "/ui/signin"


async def test_a_renewal_takes_the_providers_new_groups(sso: SsoInstall) -> None:
    alice = await sso.signed_in(ADMIN)
    sso.provider.set_groups("alice", ["llmgw-users"])  # demoted at the provider
    sso.clock.advance(sso.settings.refresh_s)
    due = await alice.console.get("/ui/models")
    assert due.status == 303 and due.headers["Location"].startswith("/ui/sso/refresh?")
    to_provider = await alice.console.get(due.headers["Location"])
    assert parse_qs(urlsplit(to_provider.headers["Location"]).query)["prompt"] == ["none"]
    onward = await alice.follow_to_provider(to_provider)
    assert onward.status == 200
    page = await alice.console.get("/ui/models")
    assert whoami(await page.text()) == ("alice@example.test", "viewer")


async def test_a_user_removed_at_the_provider_loses_access_at_the_next_renewal(
        sso: SsoInstall) -> None:
    bob = await sso.signed_in(VIEWER)
    sso.provider.remove_account("bob")
    assert (await bob.console.get("/ui/models")).status == 200  # until the renewal is due
    sso.clock.advance(sso.settings.refresh_s)
    due = await bob.console.get("/ui/models")
    back = await bob.follow_to_provider(await bob.console.get(due.headers["Location"]))
    assert back.status == 401
    assert "did not sign you in (login_required)" in await back.text()
    assert (await bob.console.get("/ui/models")).headers["Location"] == "/ui/signin"
    [session] = sso.install.store.sessions.list()
    assert session.end_reason == "refused at renewal"


async def test_a_change_waits_for_no_renewal_it_is_refused_until_the_page_is_reloaded(
        sso: SsoInstall) -> None:
    alice = await sso.signed_in(ADMIN)
    token = await alice.console.csrf("/ui/keys")
    sso.clock.advance(sso.settings.refresh_s)
    resp = await alice.console.post("/ui/keys", {"csrf_token": token, "name": "late"})
    assert resp.status == 401 and "reload the page" in await resp.text()
    assert all(k.name != "late" for k in sso.install.store.keys.list())


async def test_a_replayed_callback_is_refused(sso: SsoInstall) -> None:
    person = await sso.person(VIEWER)
    start = await person.console.get("/ui/sso/start")
    url = start.headers["Location"]
    location = await asyncio.to_thread(
        lambda: str(person.provider.sign_in(url, "bob", "bob-password").headers["location"]))
    back = urlsplit(location)
    assert (await person.console.get(f"{back.path}?{back.query}")).status == 200
    # The same state and code again: the flow cookie is spent, so nothing is started here.
    again = await person.console.get(f"{back.path}?{back.query}")
    assert again.status == 401
    assert "no sign-in was started in this browser" in await again.text()
    # Another browser replaying it has no flow of its own either.
    other = await sso.install.new_browser()
    stolen = await other.get(f"{back.path}?{back.query}")
    assert stolen.status == 401
    assert len(sso.install.store.sessions.list()) == 1


async def test_a_callback_with_another_state_is_refused(sso: SsoInstall) -> None:
    person = await sso.person(VIEWER)
    start = await person.console.get("/ui/sso/start")
    url = start.headers["Location"]
    location = await asyncio.to_thread(
        lambda: str(person.provider.sign_in(url, "bob", "bob-password").headers["location"]))
    query = parse_qs(urlsplit(location).query)
    resp = await person.console.get("/ui/sso/callback",
                                    params={"state": "forged", "code": query["code"][0]})
    assert resp.status == 401
    assert "not for the sign-in this browser started" in await resp.text()
    assert sso.install.store.sessions.list() == []


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/ui/",
                                    "/ui/\\\\evil.example", "javascript:alert(1)"])
async def test_the_return_address_never_leaves_the_console(sso: SsoInstall, target: str) -> None:
    person = await sso.person(VIEWER)
    onward = await person.sign_in(return_to=target)
    assert '<meta http-equiv="refresh" content="0;url=/ui/">' in await onward.text()


async def test_state_changing_forms_need_the_sessions_csrf_token(sso: SsoInstall) -> None:
    from llmgw.api.console.routes import PAGES

    alice = await sso.signed_in(ADMIN)
    for route in [r for r in PAGES if r.method == "POST"]:
        path = "/ui" + re.sub(r"\{(\w+)(:[^}]*)?\}", "x", route.path)
        resp = await alice.console.post(path, {"name": "x"})
        assert resp.status == 403, f"{path} took a form without its CSRF token"
    assert len(sso.install.store.sessions.list(live_at=sso.clock.now())) == 1


async def test_sign_in_starts_are_limited_per_address(sso: SsoInstall) -> None:
    person = await sso.person(VIEWER)
    starts = await asyncio.gather(*(person.console.get("/ui/sso/start") for _ in range(15)))
    assert sorted(r.status for r in starts) == [303] * 10 + [429] * 5
    refused = next(r for r in starts if r.status == 429)
    assert int(refused.headers["Retry-After"]) >= 1
    # Key sign-in shares the count: break-glass access is no way around it.
    resp = await sso.install.browser.signin(sso.install.admin)
    assert resp.status == 429


async def test_a_burst_of_refreshes_without_a_session_starts_no_flow(sso: SsoInstall) -> None:
    stranger = await sso.person(VIEWER)
    refreshes = await asyncio.gather(*(stranger.console.get("/ui/sso/refresh",
                                                            params={"return_to": "/ui/"})
                                       for _ in range(30)))
    # Sent to sign in here, never on to the provider, and no flow to come back to.
    assert {(r.status, r.headers["Location"]) for r in refreshes} == {(303, "/ui/signin")}
    assert not any(FLOW_COOKIE in r.cookies for r in refreshes)
    # A forged session cookie is no session either.
    stranger.console.set_cookie("llmgw_console", "forged")
    forged = await stranger.console.get("/ui/sso/refresh")
    assert forged.headers["Location"] == "/ui/signin" and FLOW_COOKIE not in forged.cookies


async def test_refreshes_count_against_the_sign_in_limit_like_starts(sso: SsoInstall) -> None:
    alice = await sso.signed_in(ADMIN)  # one attempt of this address
    starts = await asyncio.gather(*(alice.console.get("/ui/sso/start") for _ in range(9)))
    assert {r.status for r in starts} == {303}
    refreshes = await asyncio.gather(*(alice.console.get("/ui/sso/refresh") for _ in range(30)))
    assert {r.status for r in refreshes} == {429}
    assert not any(FLOW_COOKIE in r.cookies for r in refreshes)
    assert int(refreshes[0].headers["Retry-After"]) >= 1
    assert (await alice.console.get("/ui/sso/start")).status == 429


async def test_key_sign_in_stays_for_break_glass(sso: SsoInstall) -> None:
    resp = await sso.install.browser.signin(sso.install.admin)
    assert resp.status == 303
    page = await sso.install.browser.get("/ui/users")
    assert page.status == 200


async def test_an_email_outside_the_allowed_domains_is_refused(
        tmp_path: Path, provider: OidcProvider, sso_port: int) -> None:
    async for install in open_sso_install(tmp_path, provider, sso_port,
                                          allowed_domains=["corp.example"]):
        person = await install.person(ADMIN)
        back = await person.sign_in()
        assert back.status == 401
        assert "not of a domain allowed to sign in" in await back.text()
        assert install.install.store.sessions.list() == []


@pytest.mark.parametrize("verified", [False, None])  # said false, or not said at all
async def test_a_role_set_by_email_never_lands_on_an_account_that_only_claims_it(
        sso: SsoInstall, verified: bool | None) -> None:
    # No allowed_domains (the default). Mallory's account at the provider claims carol's email,
    # unverified; the admin then gives carol a role by email, as the guide shows.
    claimant = Account("mallory", "mallory-password", "carol@example.test", "Mallory",
                       email_verified=verified)
    owner = Account("carol", "carol-password", "carol@example.test", "Carol")
    for account in (claimant, owner):
        sso.provider.set_account(account)
    mallory = await sso.signed_in(claimant)
    install = sso.install
    status, _ = await install.api("PUT", "/admin/v1/users/carol@example.test/role",
                                  {"role": "admin"})
    assert status == 404
    assert (await mallory.console.get("/ui/")).status == 403  # still no access
    status, users = await install.api("GET", "/admin/v1/users")
    assert [(u["subject"], u["email"], u["email_verified"], u["role"]) for u in users["data"]] \
        == [("mallory", None, False, None)]
    # Once carol herself has signed in, with her verified email, the role lands on her alone.
    carol = await sso.signed_in(owner)
    status, body = await install.api("PUT", "/admin/v1/users/carol@example.test/role",
                                     {"role": "admin"})
    assert status == 200 and (body["subject"], body["email_verified"]) == ("carol", True)
    assert (await carol.console.get("/ui/users")).status == 200
    assert (await mallory.console.get("/ui/")).status == 403


async def test_a_viewer_is_shown_no_forms_to_change_the_install(sso: SsoInstall) -> None:
    person = await sso.signed_in(VIEWER)
    for path, form in (("/ui/models", 'id="serve-form"'), ("/ui/nodes", 'id="join-token-form"'),
                       ("/ui/guard", 'id="judgment-form"')):
        page = await person.console.get(path)
        assert page.status == 200
        assert form not in await page.text(), f"{path} offers a viewer a form"
    operator = await sso.signed_in(OPERATOR)
    assert 'id="serve-form"' in await (await operator.console.get("/ui/models")).text()


async def test_a_forged_callback_does_not_sign_its_victim_out(sso: SsoInstall) -> None:
    person = await sso.signed_in(VIEWER)
    forged = await person.console.get("/ui/sso/callback", params={"state": "x", "code": "y"})
    assert forged.status == 401
    assert "llmgw_console" not in forged.cookies
    assert (await person.console.get("/ui/models")).status == 200
