"""The routes page through the real app: routes listed with their targets' state, added and
removed through its forms; people's roles checked by the server whatever the page shows."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import ClientResponse

from llmgw.api.admin.routes import ADD_ROUTE, LIST_ROUTES, REMOVE_ROUTE
from llmgw.api.console import render
from llmgw.api.console.visitor import Visitor
from llmgw.api.endpoints import invoke
from llmgw.core.errors import Forbidden
from llmgw.core.users import Grant, Person, Role, User
from tests.api.console.conftest import Install

HERE = "/ui/routes"
CHAT = {"name": "chat", "targets": [{"model": "org/near"}, {"model": "far"}]}


def person(role: Role) -> Person:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    user = User(id="usr-0a1b2c3d4e", issuer="https://idp.example", subject="vic",
                email="vic@example.test", created_at=at, signed_in_at=at)
    return Person(user, Grant(role=role))


async def add_models(install: Install, *names: str) -> None:
    for name in names:
        status, body = await install.api("POST", "/admin/v1/models", {
            "name": name, "source": {"kind": "remote", "base_url": "https://api.example.com/v1"}})
        assert status == 201, body


async def routes(install: Install) -> dict[str, Any]:
    status, body = await install.api("GET", "/admin/v1/routes")
    assert status == 200
    return {r["name"]: r for r in body["data"]}


def row(page: str, name: str) -> str:
    return page.split(f'<tr data-route="{name}">', 1)[1].split("</tr>", 1)[0]


async def post(install: Install, url: str, **fields: str) -> ClientResponse:
    token = await install.browser.csrf(HERE)
    return await install.browser.post(url, {"csrf_token": token, **fields})


async def test_an_admin_adds_a_route_through_the_form_and_sees_it_listed(install: Install) -> None:
    await add_models(install, "org/near", "far")
    await install.browser.signin(install.admin)
    empty = await (await install.browser.get(HERE)).text()
    assert "No routes" in empty and 'id="route-add-form"' in empty
    resp = await post(install, HERE, name="chat", targets="org/near, far", strategy="weighted",
                      weights="3, 1", fallback_on="connect, 5xx", attempts="2", retries="1")
    assert resp.status == 303 and resp.headers["Location"] == HERE
    chat = (await routes(install))["chat"]
    assert [(t["model"], t["weight"]) for t in chat["targets"]] == [("org/near", 3), ("far", 1)]
    assert (chat["strategy"], chat["fallback"]["on"], chat["fallback"]["attempts"],
            chat["retry"]["attempts"]) == ("weighted", ["connect", "5xx"], 2, 1)
    shown = row(await (await install.browser.get(HERE)).text(), "chat")
    assert 'data-target="org/near"' in shown and "×3" in shown and "connect, 5xx" in shown
    assert 'class="remove-route danger"' in shown


async def test_empty_fields_leave_the_servers_defaults(install: Install) -> None:
    await add_models(install, "org/near", "far")
    await install.browser.signin(install.admin)
    resp = await post(install, HERE, name="chat", targets="org/near far")
    assert resp.status == 303
    chat = (await routes(install))["chat"]
    assert chat["strategy"] == "priority" and chat["retry"]["attempts"] == 0
    assert chat["fallback"]["on"] == ["connect", "5xx", "timeout", "429"]
    assert [t["weight"] for t in chat["targets"]] == [1, 1]


@pytest.mark.parametrize(("fields", "says"), [
    ({"targets": "org/near, nowhere"}, "targets not in the catalog: nowhere"),
    ({"targets": "org/near, far", "weights": "1"}, "'weights' gives 1 weights for 2 targets"),
    ({"targets": "org/near", "weights": "many"}, "'weights' takes whole numbers"),
    ({"targets": "org/near", "fallback_on": "sometimes"}, "fallback.on.0: Input should be 'connect'"),
])
async def test_a_refused_route_is_an_error_page_saying_why(install: Install, fields: dict[str, str],
                                                           says: str) -> None:
    await add_models(install, "org/near", "far")
    await install.browser.signin(install.admin)
    resp = await post(install, HERE, name="chat", **fields)
    assert resp.status == 400
    message = re.search(r'<p id="error-message">(.*?)</p>', await resp.text(), re.S)
    assert message and says in html.unescape(message.group(1))
    assert await routes(install) == {}


async def test_an_admin_removes_a_route(install: Install) -> None:
    await add_models(install, "org/near", "far")
    status, _ = await install.api("POST", "/admin/v1/routes", {**CHAT, "name": "team/chat"})
    assert status == 201
    await install.browser.signin(install.admin)
    token = await install.browser.csrf(HERE)
    resp = await install.browser.post("/ui/routes/team/chat/remove",
                                      headers={"X-CSRF-Token": token, "HX-Request": "true"})
    assert resp.status == 200 and resp.headers["HX-Redirect"] == HERE
    assert await routes(install) == {}


async def test_a_forged_post_without_the_token_adds_nothing(install: Install) -> None:
    await add_models(install, "org/near", "far")
    await install.browser.signin(install.admin)
    resp = await install.browser.post(HERE, {"name": "chat", "targets": "org/near, far"})
    assert resp.status == 403
    assert await routes(install) == {}


async def test_a_user_key_is_refused_the_page(install: Install) -> None:
    user = await install.mint("alice")
    await install.browser.signin(user["key"])
    assert (await install.browser.get(HERE)).status == 403


async def test_a_viewer_reads_routes_and_the_server_refuses_its_changes(install: Install) -> None:
    await add_models(install, "org/near", "far")
    app = install.server.app
    viewer = person(Role.VIEWER)
    assert (await invoke(LIST_ROUTES, app, viewer)).data == []
    for ep, kw in ((ADD_ROUTE, {"body": CHAT}), (REMOVE_ROUTE, {"params": {"name": "chat"}})):
        with pytest.raises(Forbidden, match="a viewer changes nothing"):
            await invoke(ep, app, viewer, **kw)
    operator = person(Role.OPERATOR)
    assert (await invoke(ADD_ROUTE, app, operator, body=CHAT)).name == "chat"
    assert set(await routes(install)) == {"chat"}


def page_for(who: Person, listed: list[dict[str, Any]]) -> str:
    return render.html("routes.html", {"visitor": Visitor(who.key, "t" * 64, who), "nav": [],
                                       "path": HERE, "routes": listed, "strategies": (),
                                       "fail_on": ()})


def test_a_viewer_is_shown_no_forms_an_operator_is() -> None:
    listed = [{**CHAT, "strategy": "priority", "fallback": {"on": [], "attempts": None},
               "retry": {"attempts": 0}, "by": "", "status": []}]
    viewer = page_for(person(Role.VIEWER), listed)
    assert 'data-route="chat"' in viewer
    assert "<form" not in viewer.split("<main>", 1)[1] and "remove-route" not in viewer
    operator = page_for(person(Role.OPERATOR), listed)
    assert 'id="route-add-form"' in operator and "remove-route" in operator


async def test_a_target_that_refuses_every_connection_is_not_shown_ready(install: Install) -> None:
    """A remote provider has no replica to health-check: its answers say whether it is up. One
    that refuses connections is shown with none ready and cooling down, never green."""
    for name in ("dead", "also-dead"):
        status, body = await install.api("POST", "/admin/v1/models", {
            "name": name, "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}})
        assert status == 201, body
    status, body = await install.api("POST", "/admin/v1/routes", {
        "name": "chat", "targets": [{"model": "dead"}, {"model": "also-dead"}],
        "fallback": {"cooldown": {"failures": 1, "window_s": 60, "cooldown_s": 600}}})
    assert status == 201, body
    status, _ = await install.api("POST", "/v1/chat/completions",
                                  {"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 502
    await install.browser.signin(install.admin)
    shown = row(await (await install.browser.get(HERE)).text(), "chat")
    for target in ("dead", "also-dead"):
        state = shown.split(f'data-target="{target}"', 1)[1].split("</span></span>", 1)[0]
        assert 'class="state state-failed"' in state and "0 ready, cooling down" in state, state
