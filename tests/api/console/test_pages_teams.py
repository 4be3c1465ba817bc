"""The teams page through the real app: teams listed with their keys and tokens, added and
removed by admins through its forms; everyone else refused by the server."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

import pytest

from llmgw.api.admin.teams import ADD_TEAM, LIST_TEAMS, REMOVE_TEAM
from llmgw.api.console import render
from llmgw.api.console.visitor import Visitor
from llmgw.api.endpoints import invoke
from llmgw.core.errors import Forbidden
from llmgw.core.types import UsageRow
from llmgw.core.users import Grant, Person, Role, User
from tests.api.console.conftest import Install

HERE = "/ui/teams"


def person(role: Role) -> Person:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    user = User(id="usr-0a1b2c3d4e", issuer="https://idp.example", subject="olga",
                email="olga@example.test", created_at=at, signed_in_at=at)
    return Person(user, Grant(role=role))


async def teams(install: Install) -> dict[str, Any]:
    status, body = await install.api("GET", "/admin/v1/teams")
    assert status == 200
    return {t["name"]: t for t in body["data"]}


def row(page: str, name: str) -> str:
    return page.split(f'<tr data-team="{name}">', 1)[1].split("</tr>", 1)[0]


async def test_an_admin_adds_a_team_through_the_form_and_sees_it_listed(install: Install) -> None:
    await install.browser.signin(install.admin)
    empty = await (await install.browser.get(HERE)).text()
    assert "No teams." in empty and 'id="team-add-form"' in empty
    token = await install.browser.csrf(HERE)
    resp = await install.browser.post(HERE, {
        "csrf_token": token, "name": "research", "models": "gemma*, gpt-4o-mini", "rpm": "600",
        "tpm": "", "tokens_per_day": "2000000", "tokens_per_month": "40000000",
        "tool_calls_per_minute": "120", "tool_concurrent": "", "weight": "2"})
    assert resp.status == 303 and resp.headers["Location"] == HERE
    research = (await teams(install))["research"]
    assert research["models"] == ["gemma*", "gpt-4o-mini"] and research["weight"] == 2.0
    assert research["limits"] == {"rpm": 600, "tpm": None, "concurrent": None,
                                  "tokens_per_day": 2_000_000, "tokens_per_month": 40_000_000,
                                  "tool_calls_per_minute": 120, "tool_concurrent": None}
    key = await install.mint("r1", team="research")
    today = datetime.now(UTC).date().isoformat()
    install.store.usage.add_usage([UsageRow(key_id=key["id"], model="m", day=today, requests=1,
                                            prompt_tokens=1200, completion_tokens=34)])
    shown = row(await (await install.browser.get(HERE)).text(), "research")
    assert "gemma*, gpt-4o-mini" in shown and "rpm 600" in shown and "tokens_per_day 2,000,000" in shown
    assert '<td class="weight">2</td>' in shown  # its share of a busy model
    assert "<td>1</td>" in shown  # its one key
    assert shown.count("<td>1,234</td>") == 2  # its tokens today and this month
    assert 'class="remove-team danger"' in shown


async def test_a_refused_team_is_an_error_page_and_adds_nothing(install: Install) -> None:
    await install.browser.signin(install.admin)
    token = await install.browser.csrf(HERE)
    for fields, says in (({"name": "no spaces"}, "name"), ({"name": "r", "rpm": "0"}, "rpm"),
                         ({"name": "r", "rpm": "lots"}, "'rpm' must be a whole number"),
                         ({"name": "r", "weight": "0"}, "weight")):
        resp = await install.browser.post(HERE, {"csrf_token": token, **fields})
        assert resp.status == 400
        assert says in html.unescape(await resp.text())
    assert await teams(install) == {}


async def test_a_team_with_live_keys_is_not_removed_until_they_are_revoked(install: Install) -> None:
    status, _ = await install.api("POST", "/admin/v1/teams", {"name": "research"})
    assert status == 201
    key = await install.mint("r1", team="research")
    await install.browser.signin(install.admin)
    token = await install.browser.csrf(HERE)
    resp = await install.browser.post("/ui/teams/research/remove", {"csrf_token": token})
    assert resp.status == 409
    assert "still has keys" in html.unescape(await resp.text())
    assert set(await teams(install)) == {"research"}
    status, _ = await install.api("POST", f"/admin/v1/keys/{key['id']}/revoke")
    assert status == 200
    resp = await install.browser.post("/ui/teams/research/remove",
                                      headers={"X-CSRF-Token": token, "HX-Request": "true"})
    assert resp.status == 200 and resp.headers["HX-Redirect"] == HERE
    assert await teams(install) == {}


async def test_a_forged_post_without_the_token_adds_nothing(install: Install) -> None:
    await install.browser.signin(install.admin)
    resp = await install.browser.post(HERE, {"name": "research"})
    assert resp.status == 403
    assert await teams(install) == {}


async def test_a_user_key_is_refused_the_page_and_its_forms(install: Install) -> None:
    user = await install.mint("alice")
    await install.browser.signin(user["key"])
    assert (await install.browser.get(HERE)).status == 403
    token = await install.browser.csrf("/ui/keys")
    resp = await install.browser.post(HERE, {"csrf_token": token, "name": "mine"})
    assert resp.status == 403
    assert await teams(install) == {}


@pytest.mark.parametrize(("role", "why"), [
    (Role.OPERATOR, "an operator does not change teams"), (Role.VIEWER, "a viewer changes nothing")])
async def test_only_admins_change_teams_on_the_server(install: Install, role: Role, why: str) -> None:
    app, who = install.server.app, person(role)
    assert (await invoke(LIST_TEAMS, app, who)).data == []  # both read them
    for ep, kw in ((ADD_TEAM, {"body": {"name": "research"}}),
                   (REMOVE_TEAM, {"params": {"name": "research"}})):
        with pytest.raises(Forbidden, match=why):
            await invoke(ep, app, who, **kw)
    assert (await invoke(ADD_TEAM, app, person(Role.ADMIN), body={"name": "research"})).name == "research"
    assert set(await teams(install)) == {"research"}


def test_the_forms_are_shown_to_admins_only() -> None:
    listed = [{"name": "research", "models": [], "limits": {}, "keys": 0, "tokens_today": 0,
               "tokens_this_month": 0, "note": "", "by": "", "weight": 1.0}]
    for role, shown in ((Role.ADMIN, True), (Role.OPERATOR, False), (Role.VIEWER, False)):
        who = person(role)
        page = render.html("teams.html", {"visitor": Visitor(who.key, "t" * 64, who), "nav": [],
                                          "path": HERE, "teams": listed, "limits": ()})
        assert 'data-team="research"' in page
        assert ('id="team-add-form"' in page, "remove-team" in page) == (shown, shown), role
