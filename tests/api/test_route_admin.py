"""Routes in the admin API of a real server, and the route then served on its data plane."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.api.conftest import MakeInstall, add_remote_models, call
from tests.fakes.provider import ANSWER, FakeProvider


@dataclass
class Api:
    client: TestClient[Any, Any]
    headers: dict[str, str]
    provider: FakeProvider

    async def call(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return await call(self.client, method, path, body, headers or self.headers)

    async def user_key(self) -> dict[str, str]:
        status, made = await self.call("POST", "/admin/v1/keys", {"name": "someone"})
        assert status == 201
        return {"Authorization": f"Bearer {made['key']}"}


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[Api]:
    provider = await FakeProvider().start()
    install = fresh_install(embedded_node=False)
    async with install.serve() as client:
        await add_remote_models(client, install.admin, provider.url, "first", "second")
        yield Api(client, install.admin, provider)
    await provider.close()


ROUTE = {"name": "chat", "targets": [{"model": "first"}, {"model": "second"}]}


async def test_a_route_is_added_shown_served_changed_and_removed(api: Api) -> None:
    status, made = await api.call("POST", "/admin/v1/routes", ROUTE)
    assert status == 201, made
    assert made["strategy"] == "priority" and made["by"]
    assert [t["model"] for t in made["status"]] == ["first", "second"]
    assert made["status"][0]["cooling_down_s"] == 0 and made["status"][0]["ready"] == 1

    status, answer = await api.call("POST", "/v1/chat/completions", {
        "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and answer["choices"][0]["message"]["content"] == ANSWER
    assert api.provider.requests[-1]["model"] == "first"
    _, models = await api.call("GET", "/v1/models")
    assert "chat" in [m["id"] for m in models["data"]]

    status, changed = await api.call("PUT", "/admin/v1/routes/chat", {
        "targets": [{"model": "second"}], "strategy": "least-busy"})
    assert status == 200 and changed["strategy"] == "least-busy"
    _, shown = await api.call("GET", "/admin/v1/routes/chat")
    assert [t["model"] for t in shown["targets"]] == ["second"]

    assert (await api.call("DELETE", "/admin/v1/routes/chat"))[0] == 200
    status, gone = await api.call("POST", "/v1/chat/completions", {
        "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 404 and gone["error"]["code"] == "model_not_found"
    assert (await api.call("GET", "/admin/v1/routes"))[1] == {"data": []}


async def test_a_route_cannot_take_a_models_name_nor_a_model_a_routes(api: Api) -> None:
    status, refused = await api.call("POST", "/admin/v1/routes", {**ROUTE, "name": "first",
                                                                  "targets": [{"model": "second"}]})
    assert status == 409, refused
    assert (await api.call("POST", "/admin/v1/routes", ROUTE))[0] == 201
    status, refused = await api.call("POST", "/admin/v1/models", {
        "name": "chat", "source": {"kind": "remote", "base_url": api.provider.url}})
    assert status == 409 and "route" in refused["error"]["message"]
    assert (await api.call("POST", "/admin/v1/routes", ROUTE))[0] == 409


@pytest.mark.parametrize(("body", "param"), [
    ({**ROUTE, "targets": [{"model": "nowhere"}]}, "targets"),
    ({**ROUTE, "targets": []}, "targets"),
    ({**ROUTE, "targets": [{"model": "first"}, {"model": "first"}]}, None),
    ({**ROUTE, "strategy": "weighted", "targets": [{"model": "first", "weight": 0}]}, None),
    ({**ROUTE, "fallback": {"on": ["teapot"]}}, "fallback.on.0"),
    ({**ROUTE, "retry": {"attempts": 11}}, "retry.attempts"),
])
async def test_a_route_that_cannot_work_is_a_400(api: Api, body: dict[str, Any],
                                                 param: str | None) -> None:
    status, refused = await api.call("POST", "/admin/v1/routes", body)
    assert status == 400, refused
    if param is not None:
        assert refused["error"]["param"] == param


async def test_a_user_key_cannot_see_or_change_routes(api: Api) -> None:
    user = await api.user_key()
    for method, path, body in [("GET", "/admin/v1/routes", None),
                               ("POST", "/admin/v1/routes", ROUTE),
                               ("DELETE", "/admin/v1/routes/chat", None)]:
        status, _ = await api.call(method, path, body, headers=user)
        assert status == 403


async def test_metrics_show_each_targets_cooldown(api: Api) -> None:
    await api.call("POST", "/admin/v1/routes", ROUTE)
    resp = await api.client.get("/metrics", headers=api.headers)
    text = await resp.text()
    assert 'llmgw_route_target_cooling_down{route="chat",target="first"} 0.0' in text
