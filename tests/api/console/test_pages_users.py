"""The users page through the real app: the people who signed in, their roles set by hand
through its forms, their sessions ended, and them forgotten; only admins, as the server checks."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import ClientResponse

from llmgw.api.admin.users import END_SESSIONS, LIST_USERS, REMOVE_USER, SET_ROLE
from llmgw.api.endpoints import invoke
from llmgw.core.errors import Forbidden
from llmgw.core.users import Grant, Person, Role, User
from tests.api.console.conftest import Install

HERE = "/ui/users"
ISSUER = "https://idp.example"
VIEWER = Grant(role=Role.VIEWER)


def signed_in(install: Install, subject: str, grant: Grant | None, name: str | None = None) -> User:
    """A person as the provider signed them in (the SSO flow's own tests cover how)."""
    return install.store.users.signed_in(ISSUER, subject, f"{subject}@example.test", name, grant,
                                         datetime.now(UTC))


def live_sessions(install: Install, user: User) -> int:
    return len(install.store.sessions.list(user.id, live_at=datetime.now(UTC)))


def row(page: str, user: User) -> str:
    return page.split(f'<tr data-user="{user.id}"', 1)[1].split("</tr>", 1)[0]


async def post(install: Install, url: str, **fields: str) -> ClientResponse:
    token = await install.browser.csrf(HERE)
    return await install.browser.post(url, {"csrf_token": token, **fields})


async def test_an_admin_sees_who_signed_in_their_roles_and_sessions(install: Install) -> None:
    await install.browser.signin(install.admin)
    empty = await (await install.browser.get(HERE)).text()
    assert "No one has signed in" in empty
    alice = signed_in(install, "alice", Grant(role=Role.TEAM_ADMIN, team="research"), "Alice A")
    nina = signed_in(install, "nina", None)
    install.store.sessions.start(alice.id, "127.0.0.1", datetime.now(UTC), timedelta(hours=1))
    page = await (await install.browser.get(HERE)).text()
    first = row(page, alice)
    assert "alice@example.test" in first and "Alice A" in first and "their groups" in first
    assert '<option value="team-admin" selected>' in first and 'value="research"' in first
    assert "<td>1</td>" in first  # one live session
    assert '<option value="" selected>no access</option>' in row(page, nina)
    assert 'class="end-sessions' in first and 'class="remove-user danger"' in first


async def test_setting_a_role_through_the_form_changes_it_in_the_store(install: Install) -> None:
    bob = signed_in(install, "bob", VIEWER)
    await install.browser.signin(install.admin)
    url = f"/ui/users/{bob.id}/role"
    resp = await post(install, url, role="team-admin", team="research")
    assert resp.status == 303 and resp.headers["Location"] == HERE
    after = install.store.users.get(bob.id)
    assert (after.grant, after.role_source) == (Grant(role=Role.TEAM_ADMIN, team="research"), "admin")
    assert "an admin" in row(await (await install.browser.get(HERE)).text(), bob)
    # The row's team field still holds the team: it counts only for a team admin.
    assert (await post(install, url, role="operator", team="research")).status == 303
    assert install.store.users.get(bob.id).grant == Grant(role=Role.OPERATOR)
    assert (await post(install, url, role="", team="")).status == 303
    assert install.store.users.get(bob.id).grant is None  # no access


async def test_a_team_admin_without_a_team_is_refused_and_changes_nothing(install: Install) -> None:
    bob = signed_in(install, "bob", VIEWER)
    await install.browser.signin(install.admin)
    for fields, says in (({"role": "team-admin", "team": " "}, "a team admin needs a team"),
                         ({"role": "owner"}, "'owner' is not a role")):
        resp = await post(install, f"/ui/users/{bob.id}/role", **fields)
        assert resp.status == 400
        assert says in html.unescape(await resp.text())
    assert install.store.users.get(bob.id).grant == VIEWER


async def test_ending_a_users_sessions_ends_every_one(install: Install) -> None:
    bob = signed_in(install, "bob", VIEWER)
    carol = signed_in(install, "carol", VIEWER)
    for who in (bob, bob, carol):
        install.store.sessions.start(who.id, "127.0.0.1", datetime.now(UTC), timedelta(hours=1))
    await install.browser.signin(install.admin)
    token = await install.browser.csrf(HERE)
    resp = await install.browser.post(f"/ui/users/{bob.id}/signout",
                                      headers={"X-CSRF-Token": token, "HX-Request": "true"})
    assert resp.status == 200 and resp.headers["HX-Redirect"] == HERE
    assert (live_sessions(install, bob), live_sessions(install, carol)) == (0, 1)
    assert "<td>0</td>" in row(await (await install.browser.get(HERE)).text(), bob)


async def test_removing_a_user_forgets_them_and_their_sessions(install: Install) -> None:
    bob = signed_in(install, "bob", VIEWER)
    install.store.sessions.start(bob.id, "127.0.0.1", datetime.now(UTC), timedelta(hours=1))
    await install.browser.signin(install.admin)
    resp = await post(install, f"/ui/users/{bob.id}/remove")
    assert resp.status == 303
    assert install.store.users.list() == [] and live_sessions(install, bob) == 0
    resp = await post(install, f"/ui/users/{bob.id}/remove")
    assert resp.status == 404


async def test_a_forged_post_without_the_token_changes_nothing(install: Install) -> None:
    bob = signed_in(install, "bob", VIEWER)
    install.store.sessions.start(bob.id, "127.0.0.1", datetime.now(UTC), timedelta(hours=1))
    await install.browser.signin(install.admin)
    for path, fields in (("role", {"role": "admin"}), ("signout", {}), ("remove", {})):
        resp = await install.browser.post(f"/ui/users/{bob.id}/{path}", fields)
        assert resp.status == 403
    assert install.store.users.get(bob.id).grant == VIEWER and live_sessions(install, bob) == 1


async def test_a_user_key_is_refused_the_page(install: Install) -> None:
    user = await install.mint("alice")
    await install.browser.signin(user["key"])
    assert (await install.browser.get(HERE)).status == 403


@pytest.mark.parametrize(("grant", "why"), [
    (Grant(role=Role.VIEWER), "a viewer does not see keys, usage or users"),
    (Grant(role=Role.OPERATOR), "an operator does not see keys, usage or users"),
    (Grant(role=Role.TEAM_ADMIN, team="research"), "a team admin manages team research's keys"),
])
async def test_only_admins_reach_people_on_the_server(install: Install, grant: Grant, why: str) -> None:
    bob = signed_in(install, "bob", VIEWER)
    app, who = install.server.app, Person(signed_in(install, "vic", grant), grant)
    for ep, kw in ((LIST_USERS, {}), (SET_ROLE, {"body": {"role": "admin"}}), (END_SESSIONS, {}),
                   (REMOVE_USER, {})):
        with pytest.raises(Forbidden, match=why):
            await invoke(ep, app, who, params={"user": bob.id}, **kw)
    assert install.store.users.get(bob.id).grant == VIEWER
    admin = Grant(role=Role.ADMIN)
    boss = Person(signed_in(install, "ada", admin), admin)
    changed = await invoke(SET_ROLE, app, boss, body={"role": "operator"}, params={"user": bob.id})
    assert changed.role == "operator" and install.store.users.get(bob.id).grant == Grant(role=Role.OPERATOR)
