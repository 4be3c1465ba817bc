"""Teams in a real server's admin API and data plane: team limits and budgets in the caller's
dialect, and a team admin that cannot reach beyond its team."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api.appkeys import GATEWAY
from llmgw.core.settings import load
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.store.store import Store
from tests.api.conftest import MakeInstall, add_remote_models, call
from tests.fakes.provider import ANSWER, FakeProvider
from tests.support.pg import fresh_database

ASK = [{"role": "user", "content": "hi"}]


@dataclass
class Api:
    client: TestClient[Any, Any]
    admin: dict[str, str]
    provider: FakeProvider

    async def call(self, method: str, path: str, body: Any = None,
                   as_: dict[str, str] | None = None) -> tuple[int, Any]:
        return await call(self.client, method, path, body, as_ or self.admin)

    async def key(self, body: dict[str, Any], as_: dict[str, str] | None = None
                  ) -> tuple[dict[str, str], dict[str, Any]]:
        status, made = await self.call("POST", "/admin/v1/keys", body, as_)
        assert status == 201, made
        return {"Authorization": f"Bearer {made['key']}"}, made

    async def flush(self) -> None:
        """Write the usage the server counted (it does so every few seconds by itself)."""
        meter = self.client.app[GATEWAY].meter
        assert meter is not None
        await meter.flush()

    async def cached_chat(self, as_: dict[str, str]) -> tuple[int, str]:
        """A deterministic chat completion (the cache may answer it), once its answer is kept:
        its status and the cache's word on it."""
        resp = await self.client.post("/v1/chat/completions", headers=as_, json={
            "model": "alpha", "messages": ASK, "temperature": 0})
        cache = self.client.app[GATEWAY].cache
        assert cache is not None
        await cache.settled()
        return resp.status, resp.headers.get("X-Llmgw-Cache", "none")

    async def chat(self, as_: dict[str, str], model: str = "alpha") -> tuple[int, Any]:
        return await self.call("POST", "/v1/chat/completions", {"model": model, "messages": ASK},
                               as_)


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[Api]:
    provider = await FakeProvider().start()
    install = fresh_install(embedded_node=False)
    async with install.serve() as client:
        api = Api(client, install.admin, provider)
        await add_remote_models(client, install.admin, provider.url, "alpha", "beta")
        for team in ({"name": "red", "models": ["alpha"], "limits": {"rpm": 100}},
                     {"name": "blue"}):
            status, made = await api.call("POST", "/admin/v1/teams", team)
            assert status == 201, made
        yield api
    await provider.close()


async def test_a_team_is_created_shown_changed_and_removed_once_it_has_no_keys(api: Api) -> None:
    _, shown = await api.call("GET", "/admin/v1/teams/red")
    assert shown["models"] == ["alpha"] and shown["limits"]["rpm"] == 100 and shown["keys"] == 0
    assert (await api.call("POST", "/admin/v1/teams", {"name": "red"}))[0] == 409
    status, changed = await api.call("PUT", "/admin/v1/teams/red", {
        "limits": {"tokens_per_day": 5000}})
    assert status == 200 and changed["limits"] == {"rpm": None, "tpm": None, "concurrent": None,
                                                  "tokens_per_day": 5000, "tokens_per_month": None,
                                                  "tool_calls_per_minute": None,
                                                  "tool_concurrent": None}
    member, made = await api.key({"name": "m", "team": "red"})
    assert made["team"] == "red"
    assert (await api.call("DELETE", "/admin/v1/teams/red"))[0] == 409  # it has a live key
    await api.call("POST", f"/admin/v1/keys/{made['id']}/revoke")
    assert (await api.call("DELETE", "/admin/v1/teams/red"))[0] == 200
    status, refused = await api.call("POST", "/admin/v1/keys", {"name": "x", "team": "red"})
    assert status == 400 and refused["error"]["param"] == "team"


async def test_a_teams_weight_is_stored_and_is_what_the_request_path_shares_by(api: Api) -> None:
    _, shown = await api.call("GET", "/admin/v1/teams/red")
    assert shown["weight"] == 1.0  # an even share unless said
    status, changed = await api.call("PUT", "/admin/v1/teams/red", {"weight": 3})
    assert status == 200 and changed["weight"] == 3.0
    assert (await api.call("GET", "/admin/v1/teams/red"))[1]["weight"] == 3.0
    team = api.client.app[GATEWAY].team(changed["id"])
    assert team is not None and team.weight == 3.0
    for bad in (0, -1, 1001):
        status, refused = await api.call("PUT", "/admin/v1/teams/red", {"weight": bad})
        assert status == 400 and refused["error"]["param"] == "weight", refused


async def test_a_team_key_calls_only_the_teams_models(api: Api) -> None:
    member, _ = await api.key({"name": "m", "team": "red"})
    status, answer = await api.chat(member)
    assert status == 200 and answer["choices"][0]["message"]["content"] == ANSWER
    status, refused = await api.chat(member, "beta")
    assert status == 404 and refused["error"]["code"] == "model_not_found"
    _, models = await api.call("GET", "/v1/models", as_=member)
    assert [m["id"] for m in models["data"]] == ["alpha"]


async def test_a_spent_team_budget_refuses_every_key_of_the_team_in_its_dialect(api: Api) -> None:
    await api.call("PUT", "/admin/v1/teams/blue", {"limits": {"tokens_per_day": 20}})
    first, _ = await api.key({"name": "one", "team": "blue"})
    second, _ = await api.key({"name": "two", "team": "blue"})
    outsider, _ = await api.key({"name": "three"})
    assert (await api.chat(first))[0] == 200  # 14 tokens of 20
    assert (await api.chat(second))[0] == 200  # admitted alone on the 6 left: 28 spent
    status, refused = await api.chat(first)
    assert status == 429 and refused["error"]["code"] == "budget_exceeded"
    assert "team blue's" in refused["error"]["message"]
    resp = await api.client.post("/v1/messages", json={"model": "alpha", "max_tokens": 8,
                                                       "messages": ASK},
                                 headers={**second, "anthropic-version": "2023-06-01"})
    body = await resp.json()
    assert resp.status == 429 and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error" and "retry-after" in resp.headers
    assert (await api.chat(outsider))[0] == 200
    await api.flush()
    _, usage = await api.call("GET", "/admin/v1/usage?team=blue")
    assert sum(r["prompt_tokens"] + r["completion_tokens"] for r in usage["data"]) == 28
    _, team = await api.call("GET", "/admin/v1/teams/blue")
    assert team["tokens_today"] == 28 and team["keys"] == 2


@pytest.fixture
async def red_admin(api: Api) -> dict[str, str]:
    headers, made = await api.key({"name": "red-admin", "team": "red", "team_admin": True})
    assert made["team_admin"] is True
    return headers


async def test_a_team_admin_mints_for_its_team_within_its_models_and_limits(
    api: Api, red_admin: dict[str, str],
) -> None:
    _, made = await api.key({"name": "r1", "limits": {"rpm": 50}}, as_=red_admin)
    assert made["team"] == "red" and made["models"] == ["alpha"] and not made["team_admin"]
    for body, param in [
        ({"name": "x", "team": "blue"}, "team"),
        ({"name": "x", "team_admin": True}, "team_admin"),
        ({"name": "x", "models": ["beta"]}, "models"),
        ({"name": "x", "limits": {"rpm": 101}}, "limits"),
        ({"name": "x", "scope": "admin"}, "scope"),
    ]:
        status, refused = await api.call("POST", "/admin/v1/keys", body, red_admin)
        assert status == 403 and refused["error"]["param"] == param, (body, refused)


async def test_a_team_admin_cannot_reach_other_teams_keys_or_usage(
    api: Api, red_admin: dict[str, str],
) -> None:
    blue, blue_key = await api.key({"name": "blue-1", "team": "blue"})
    red, red_key = await api.key({"name": "red-1"}, as_=red_admin)
    assert (await api.chat(blue))[0] == 200 and (await api.chat(red))[0] == 200
    await api.flush()

    _, listed = await api.call("GET", "/admin/v1/keys", as_=red_admin)
    assert {k["name"] for k in listed["data"]} == {"red-admin", "red-1"}
    for ref in (blue_key["id"], blue_key["name"], blue_key["prefix"]):
        assert (await api.call("GET", f"/admin/v1/keys/{ref}", as_=red_admin))[0] == 404
    assert (await api.call("POST", f"/admin/v1/keys/{blue_key['id']}/revoke", as_=red_admin))[0] == 404
    assert (await api.call("GET", "/admin/v1/usage?team=blue", as_=red_admin))[0] == 404
    assert (await api.call("GET", f"/admin/v1/usage?key={blue_key['id']}", as_=red_admin))[0] == 404
    _, usage = await api.call("GET", "/admin/v1/usage", as_=red_admin)
    assert {r["key_id"] for r in usage["data"]} == {red_key["id"]}
    _, usage = await api.call("GET", "/admin/v1/usage?team=red", as_=red_admin)
    assert {r["key_id"] for r in usage["data"]} == {red_key["id"]}
    for method, path in [("GET", "/admin/v1/teams"), ("GET", "/admin/v1/teams/blue"),
                         ("DELETE", "/admin/v1/teams/blue")]:
        assert (await api.call(method, path, as_=red_admin))[0] == 403

    # A team member that is not its admin sees itself only.
    _, own = await api.call("GET", "/admin/v1/keys", as_=red)
    assert [k["name"] for k in own["data"]] == ["red-1"]


async def test_a_team_admin_key_mints_within_its_own_grants_and_its_keys_die_with_it(
        api: Api) -> None:
    """A team admin key limited to one of its team's models mints nothing for another, its keys
    get its limits, and once it is revoked they are refused at once, in each caller's dialect."""
    await api.call("PUT", "/admin/v1/teams/blue", {"models": ["alpha", "beta"]})
    lead, _ = await api.key({"name": "lead", "team": "blue", "team_admin": True,
                             "models": ["alpha"], "limits": {"rpm": 7}})
    status, refused = await api.call("POST", "/admin/v1/keys", {"name": "b", "models": ["beta"]},
                                     lead)
    assert status == 403 and refused["error"]["param"] == "models"
    assert "beta" in refused["error"]["message"]
    member, made = await api.key({"name": "m"}, as_=lead)
    assert made["models"] == ["alpha"] and made["limits"]["rpm"] == 7
    assert (await api.chat(member))[0] == 200

    _, listed = await api.call("GET", "/admin/v1/keys")
    lead_id = next(k["id"] for k in listed["data"] if k["name"] == "lead")
    _, revoked = await api.call("POST", f"/admin/v1/keys/{lead_id}/revoke")
    assert revoked["revoked_beneath"] == 1
    status, body = await api.chat(member)
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    resp = await api.client.post("/v1/messages", json={"model": "alpha", "max_tokens": 8,
                                                       "messages": ASK},
                                 headers={**member, "anthropic-version": "2023-06-01"})
    body = await resp.json()
    assert resp.status == 401 and body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"


async def test_a_team_made_again_under_a_removed_ones_name_inherits_nothing(api: Api) -> None:
    """Team red is removed and made again under its name: the new team is another tenant. It is
    served none of the old team's cached answers, its admin sees none of the old team's keys or
    usage, and its limits count from nothing."""
    status, _ = await api.call("PUT", "/admin/v1/models/alpha/cache", {"cache": {"mode": "exact"}})
    assert status == 200
    old, old_key = await api.key({"name": "old", "team": "red"})
    for _ in range(2):  # the second answer comes from the cache
        assert (await api.cached_chat(old))[0] == 200
    assert len(api.provider.requests) == 1
    await api.flush()
    await api.call("POST", f"/admin/v1/keys/{old_key['id']}/revoke")
    assert (await api.call("DELETE", "/admin/v1/teams/red"))[0] == 200
    status, made = await api.call("POST", "/admin/v1/teams", {"name": "red", "models": ["alpha"],
                                                              "limits": {"rpm": 100}})
    assert status == 201
    _, team = await api.call("GET", "/admin/v1/teams/red")
    assert team["keys"] == 0 and team["tokens_today"] == 0
    assert team["live"]["requests_this_minute"] == 0  # not the old team's 2

    lead, lead_key = await api.key({"name": "lead", "team": "red", "team_admin": True})
    new, new_key = await api.key({"name": "new"}, as_=lead)
    assert await api.cached_chat(new) == (200, "miss")
    assert len(api.provider.requests) == 2
    await api.flush()
    _, listed = await api.call("GET", "/admin/v1/keys", as_=lead)
    assert {k["name"] for k in listed["data"]} == {"lead", "new"}
    assert (await api.call("GET", f"/admin/v1/keys/{old_key['id']}", as_=lead))[0] == 404
    assert (await api.call("GET", f"/admin/v1/usage?key={old_key['id']}", as_=lead))[0] == 404
    for path in ("/admin/v1/usage?team=red", "/admin/v1/usage"):
        _, usage = await api.call("GET", path, as_=lead)
        assert {r["key_id"] for r in usage["data"]} == {new_key["id"]}, path
    _, team = await api.call("GET", "/admin/v1/teams/red")
    assert team["keys"] == 2 and team["tokens_today"] == 14  # the new key's one request


async def test_a_team_budget_holds_across_two_servers_on_postgresql(
    postgres_url: str, tmp_path: Path,
) -> None:
    """Two servers share one PostgreSQL store: a team's keys spend its day's budget on both; a
    burst at the edge overruns it by at most one request per server, and once the servers have
    synced, both refuse every key of the team (and no other key)."""
    provider = await FakeProvider().start()
    url = fresh_database(postgres_url)
    result = init(tmp_path / "a", database=url, guard=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.toml").write_text((tmp_path / "a" / "config.toml").read_text())
    clients = []
    for name in ("a", "b"):
        settings = load(tmp_path / name).model_copy(update={"embedded_node": False})
        app = Server(tmp_path / name, settings, Store.open(url), server_id=f"server-{name}").build_app()
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
    try:
        a, b = (Api(c, {"Authorization": f"Bearer {result.admin_key}"}, provider) for c in clients)
        await a.call("POST", "/admin/v1/models", {
            "name": "alpha", "source": {"kind": "remote", "base_url": provider.url}})
        assert (await a.call("POST", "/admin/v1/teams", {
            "name": "red", "limits": {"tokens_per_day": 100}}))[0] == 201
        k1, _ = await a.key({"name": "one", "team": "red"})
        k2, _ = await a.key({"name": "two", "team": "red"})
        outsider, _ = await a.key({"name": "three"})

        async def synced() -> None:  # each server's sync, as its loop runs it every second
            for api in (a, b, a):
                gw = api.client.app[GATEWAY]
                assert gw.limiter is not None and gw.meter is not None
                await gw.limiter.sync(gw.meter.flush)

        async def until(api: Api, check: Any) -> None:  # b learns of a's writes at its refresh
            for _ in range(100):
                if await check(api):
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the second server never saw the change")

        await until(b, lambda api: _answers(api, k2))  # 14 tokens, on b
        for key in (k1, k2, k1, k2, k1):
            assert (await a.chat(key))[0] == 200  # 6 x 14 = 84 of 100
        await synced()
        # A burst at the edge, on both servers at once, with 16 left.
        answers = await asyncio.gather(*(api.chat(key) for api in (a, b) for key in (k1, k2)
                                         for _ in range(3)))
        ok = sum(1 for status, _ in answers if status == 200)
        assert 2 <= ok <= 4  # each runs requests alone on what is left, while some is
        assert all(status in (200, 429) for status, _ in answers)
        await synced()
        for api in (a, b):
            for key in (k1, k2):
                status, refused = await api.chat(key)
                assert status == 429 and refused["error"]["code"] == "budget_exceeded"
            assert (await api.chat(outsider))[0] == 200
        await synced()
        _, usage = await a.call("GET", "/admin/v1/usage?team=red")
        spent = sum(r["prompt_tokens"] + r["completion_tokens"] for r in usage["data"])
        # The stated tolerance: each server admits up to what was left at its last sync (16),
        # one of them beyond the budget, plus one request per server past it.
        assert 100 <= spent <= 100 + 16 + 2 * 14, spent
    finally:
        for c in clients:
            await c.close()
        await provider.close()


async def _answers(api: Api, key: dict[str, str]) -> bool:
    return (await api.chat(key))[0] == 200
