"""The audit log through the admin API: every change made there appears once, with who made it
and the thing before and after; a change that fails appears nowhere; no secret ever appears."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from llmgw.store.store import Store
from tests.api.conftest import MakeInstall, call

ADMIN_NAME = "admin"  # the key `server init` makes


@dataclass
class Api:
    client: TestClient[Any, Any]
    headers: dict[str, str]
    store: Store
    admin_key: str

    async def call(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return await call(self.client, method, path, body, headers or self.headers)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = await self.call(method, path, body)
        assert 200 <= status < 300, answer
        return answer

    async def audit(self, query: str = "") -> list[dict[str, Any]]:
        """The log, oldest first (the API answers newest first)."""
        return list(reversed((await self.ok("GET", "/admin/v1/audit" + query))["data"]))


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[Api]:
    install = fresh_install()
    async with install.serve() as client:
        yield Api(client, install.admin, install.store, install.admin_key)


def remote(name: str) -> dict[str, Any]:
    return {"name": name, "source": {"kind": "remote", "base_url": "https://api.example.com/v1",
                                     "api_key_env": "LLMGW_PROVIDER_OPENAI"}}


def what(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["kind"], e["action"], e["target"]) for e in entries]


async def test_each_admin_change_appears_once_with_who_and_before_and_after(api: Api) -> None:
    policy = {"judges": ["qwen3guard-0.6b"], "budget_ms": 3000}
    await api.ok("POST", "/admin/v1/models", remote("gpt"))
    await api.ok("POST", "/admin/v1/models/gpt/scale", {"min": 1, "max": 2})
    await api.ok("PUT", "/admin/v1/guard/policies/strict", policy)
    await api.ok("PUT", "/admin/v1/guard/policies/strict", {**policy, "budget_ms": 4000})
    await api.ok("POST", "/admin/v1/guard/switches", {"log_prompts": True})
    await api.ok("PUT", "/admin/v1/limits/default", {"rpm": 60})
    key = await api.ok("POST", "/admin/v1/keys", {"name": "team-a", "limits": {"tpm": 1000}})
    await api.ok("POST", f"/admin/v1/keys/{key['id']}/revoke")
    await api.ok("POST", "/admin/v1/nodes/local/labels", {"set": {"zone": "a"}})
    await api.ok("POST", "/admin/v1/nodes/local/cordon")
    await api.ok("DELETE", "/admin/v1/guard/policies/strict")
    await api.ok("DELETE", "/admin/v1/models/gpt")
    # Reads change nothing and are not logged.
    await api.ok("GET", "/admin/v1/models")
    await api.ok("GET", "/admin/v1/keys")

    log = await api.audit()
    assert what(log) == [
        ("model", "add", "gpt"), ("model", "scale", "gpt"),
        ("policy", "set", "strict"), ("policy", "set", "strict"),
        ("switch", "set", "log_prompts"), ("limits", "set", "default"),
        ("key", "create", key["id"]), ("key", "revoke", key["id"]),
        ("node", "label", "local"), ("node", "cordon", "local"),
        ("policy", "remove", "strict"), ("model", "remove", "gpt"),
    ]
    assert {e["by"].split(" ")[0] for e in log} == {ADMIN_NAME}
    add, scale, made, replaced, switch, limits, created, revoked, label, cordon, dropped, removed = log
    assert add["before"] is None and add["after"]["source"]["base_url"] == "https://api.example.com/v1"
    assert scale["before"]["scaling"]["max"] != 2 and scale["after"]["scaling"] == {
        **scale["before"]["scaling"], "min": 1, "max": 2}
    assert made["before"] is None and made["after"]["budget_ms"] == 3000
    assert replaced["before"]["budget_ms"] == 3000 and replaced["after"]["budget_ms"] == 4000
    assert switch["before"] == {"on": False} and switch["after"] == {"on": True}
    assert limits["before"] == {} and limits["after"] == {"rpm": 60}
    assert created["before"] is None and created["after"]["name"] == "team-a"
    assert created["after"]["limits"] == {"tpm": 1000}
    assert revoked["before"]["revoked"] is False and revoked["after"]["revoked"] is True
    assert label["after"]["labels"]["zone"] == "a" and "zone" not in label["before"]["labels"]
    assert cordon["before"]["cordoned"] is False and cordon["after"]["cordoned"] is True
    assert dropped["before"]["budget_ms"] == 4000 and dropped["after"] is None
    assert removed["before"]["source"]["kind"] == "remote" and removed["after"] is None
    assert [e["id"] for e in log] == sorted(e["id"] for e in log)


async def test_a_change_that_fails_appears_nowhere(api: Api) -> None:
    await api.ok("POST", "/admin/v1/models", remote("gpt"))
    key = await api.ok("POST", "/admin/v1/keys", {"name": "team-a"})

    failures = [
        ("POST", "/admin/v1/models", remote("gpt"), 409),  # taken: refused inside the transaction
        ("POST", "/admin/v1/models/nope/scale", {"min": 1}, 404),
        ("DELETE", "/admin/v1/models/nope", None, 404),
        ("DELETE", "/admin/v1/guard/policies/nope", None, 404),
        ("POST", "/admin/v1/keys", {"name": "team-a"}, 409),  # a live key has the name
        ("POST", "/admin/v1/keys/nope/revoke", None, 404),
        ("POST", "/admin/v1/nodes/nope/cordon", None, 404),
        ("PUT", "/admin/v1/limits/default", {"rpm": -1}, 400),
    ]
    for method, path, body, status in failures:
        got, answer = await api.call(method, path, body)
        assert got == status, (path, answer)

    assert what(await api.audit()) == [("model", "add", "gpt"), ("key", "create", key["id"])]


async def test_key_secrets_and_hashes_never_appear(api: Api) -> None:
    created = await api.ok("POST", "/admin/v1/keys", {"name": "team-a"})
    rotated = await api.ok("POST", f"/admin/v1/keys/{created['id']}/rotate")
    token = await api.ok("POST", "/admin/v1/keys", {"name": "node-b", "scope": "node"})

    resp = await api.client.get("/admin/v1/audit", headers=api.headers)
    text = await resp.text()
    hashes = [k.hash for k in api.store.keys.list()]
    for secret in (created["key"], rotated["key"], token["key"], api.admin_key, *hashes):
        assert secret not in text
    assert '"hash"' not in text
    log = await api.audit()
    assert what(log) == [("key", "create", created["id"]), ("key", "revoke", created["id"]),
                         ("key", "rotate", rotated["id"]), ("key", "create", token["id"])]
    assert log[2]["after"]["prefix"] == rotated["prefix"]  # what an operator can match a key by


async def test_the_log_is_filtered_by_who_kind_and_since_and_only_admins_read_it(api: Api) -> None:
    await api.ok("POST", "/admin/v1/models", remote("gpt"))
    user = await api.ok("POST", "/admin/v1/keys", {"name": "team-a"})
    as_user = {"Authorization": f"Bearer {user['key']}"}
    # A user key minting a key is a change too, made by that key.
    status, minted = await api.call("POST", "/admin/v1/keys", {"name": "team-a-ci"}, as_user)
    assert status == 201

    assert what(await api.audit("?kind=model")) == [("model", "add", "gpt")]
    assert what(await api.audit("?who=team-a")) == [("key", "create", minted["id"])]
    assert len(await api.audit("?since=2000-01-01T00:00:00Z")) == 3
    assert await api.audit("?since=2999-01-01T00:00:00Z") == []
    status, _ = await api.call("GET", "/admin/v1/audit?kind=nonsense")
    assert status == 400
    status, _ = await api.call("GET", "/admin/v1/audit", headers=as_user)
    assert status == 403


async def test_routes_and_teams_are_logged_with_before_and_after(api: Api) -> None:
    for name in ("first", "second"):
        await api.ok("POST", "/admin/v1/models", remote(name))
    await api.ok("POST", "/admin/v1/routes", {"name": "chat", "targets": [{"model": "first"}]})
    await api.ok("PUT", "/admin/v1/routes/chat", {"targets": [{"model": "second"}]})
    await api.ok("DELETE", "/admin/v1/routes/chat")
    await api.ok("POST", "/admin/v1/teams", {"name": "red", "limits": {"rpm": 10}})
    status, _ = await api.call("POST", "/admin/v1/teams", {"name": "red"})  # taken: not logged
    assert status == 409
    await api.ok("DELETE", "/admin/v1/teams/red")

    log = await api.audit("?kind=route")
    assert what(log) == [("route", "add", "chat"), ("route", "set", "chat"), ("route", "remove", "chat")]
    add, changed, removed = log
    assert add["before"] is None and add["after"]["targets"][0]["model"] == "first"
    assert changed["before"]["targets"][0]["model"] == "first"
    assert changed["after"]["targets"][0]["model"] == "second"
    assert removed["before"]["targets"][0]["model"] == "second" and removed["after"] is None
    teams = await api.audit("?kind=team")
    assert what(teams) == [("team", "add", "red"), ("team", "remove", "red")]
    assert teams[0]["after"]["limits"]["rpm"] == 10


async def test_a_cache_purge_is_logged_with_who_what_and_from_where(api: Api) -> None:
    await api.ok("POST", "/admin/v1/models", remote("gpt"))
    await api.ok("POST", "/admin/v1/cache/purge", {"model": "gpt"})
    await api.ok("POST", "/admin/v1/cache/purge", {})
    log = await api.audit("?kind=cache")
    assert what(log) == [("cache", "purge", "gpt"), ("cache", "purge", "*")]
    assert [e["after"] for e in log] == [{"model": "gpt"}, {"model": None}]
    assert {(e["by"].split(" ")[0], e["address"]) for e in log} == {(ADMIN_NAME, "127.0.0.1")}
