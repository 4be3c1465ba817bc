"""Keys, limits and usage through the real app: budgets under a concurrent burst, key families,
unique names, and datetimes without a zone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.types import UsageRow
from llmgw.store.store import Store
from tests.api.conftest import MakeInstall, call

MODEL = "m"
# What the stand-in upstream reports for every answer.
USED = 12


@dataclass
class Upstream:
    """A stand-in provider that answers chat with USED tokens; with `hold` set, only once `hold`
    requests have either arrived here or been refused by the gateway."""

    url: str
    hold: int = 0
    arrived: int = 0
    refused: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def count(self, *, arrived: int = 0, refused: int = 0) -> None:
        self.arrived += arrived
        self.refused += refused
        if self.arrived + self.refused >= self.hold:
            self.release.set()


@dataclass
class Api:
    client: TestClient[Any, Any]
    admin: str
    upstream: Upstream
    store: Store

    async def call(self, method: str, path: str, body: Any = None,
                   key: str | None = None) -> tuple[int, dict[str, Any]]:
        return await call(self.client, method, path, body,
                          {"Authorization": f"Bearer {key or self.admin}"})

    async def mint(self, name: str, key: str | None = None, **fields: Any) -> dict[str, Any]:
        status, body = await self.call("POST", "/admin/v1/keys", {"name": name, **fields}, key)
        assert status == 201, body
        return body

    async def chat(self, key: str) -> int:
        resp = await self.client.post(
            "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
            json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
        await resp.read()
        return resp.status


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream("")

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        up.count(arrived=1)
        await up.release.wait()
        return web.json_response({
            "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "ok"}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": USED - 7, "total_tokens": USED},
        })

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app)
    await server.start_server()
    up.url = str(server.make_url("/v1"))
    yield up
    await server.close()


@pytest.fixture
async def api(fresh_install: MakeInstall, upstream: Upstream) -> AsyncIterator[Api]:
    """The real app on a fresh install, with model MODEL served by the stand-in upstream."""
    install = fresh_install()
    async with install.serve() as client:
        api = Api(client, install.admin_key, upstream, install.store)
        status, body = await api.call("POST", "/admin/v1/models", {
            "name": MODEL, "source": {"kind": "remote", "base_url": upstream.url},
            "profiles": [{"engine": "remote", "cpu_cores": 0, "min_memory_gb": 0}],
        })
        assert status == 201, body
        yield api


# --- budgets under concurrency -----------------------------------------------------------------


@pytest.mark.parametrize("family", [False, True])
async def test_a_burst_of_100_concurrent_requests_stays_within_the_daily_budget(
    api: Api, family: bool
) -> None:
    first = await api.mint("burst", limits={"tokens_per_day": 100})
    keys = [first["key"]]
    if family:  # the burst comes from the key and from the keys minted beneath it
        child = await api.mint("burst-child", first["key"])
        keys += [child["key"], (await api.mint("burst-grandchild", child["key"]))["key"]]
    # The upstream holds every request it gets until each of the 100 is either there or refused:
    # all that admission lets through is in flight at once.
    api.upstream.hold = 100

    async def one(key: str) -> int:
        status = await api.chat(key)
        if status == 429:
            api.upstream.count(refused=1)
        return status

    statuses = await asyncio.gather(*(one(keys[i % len(keys)]) for i in range(100)))
    admitted = statuses.count(200)
    assert statuses.count(429) == 100 - admitted
    # Each reserved 5 + ~30 tokens: only the reservations that fit in 100 were let through.
    assert 1 <= admitted * USED <= 100

    api.upstream.hold = 0
    # One at a time, requests go on while any budget is left: the last one passes it by at most
    # its own use, and then the key is refused.
    while await api.chat(keys[admitted % len(keys)]) == 200:
        admitted += 1
    assert 100 <= admitted * USED <= 100 + USED
    for key in keys:
        assert await api.chat(key) == 429


# --- key families ------------------------------------------------------------------------------


async def test_a_family_shares_its_first_keys_rpm(api: Api) -> None:
    parent = await api.mint("team", limits={"rpm": 5})
    child = await api.mint("team-child", parent["key"])
    grandchild = await api.mint("team-grandchild", child["key"])
    assert child["limits"]["rpm"] == grandchild["limits"]["rpm"] == 5  # each may use up to 5...
    keys = [k["key"] for k in (parent, child, grandchild)] * 10
    statuses = await asyncio.gather(*(api.chat(k) for k in keys))
    assert statuses.count(200) == 5  # ...but the three share one 5 a minute
    assert statuses.count(429) == 25


async def test_revoking_a_key_revokes_what_it_minted(api: Api) -> None:
    parent = await api.mint("parent")
    child = await api.mint("child", parent["key"])
    grandchild = await api.mint("grandchild", child["key"])
    other = await api.mint("other")
    for k in (child, grandchild):
        assert await api.chat(k["key"]) == 200

    status, revoked = await api.call("POST", f"/admin/v1/keys/{parent['id']}/revoke")
    assert status == 200 and revoked["revoked"] and revoked["revoked_beneath"] == 2
    for k in (parent, child, grandchild):
        assert await api.chat(k["key"]) == 401
        status, body = await api.call("POST", "/admin/v1/keys", {"name": "again"}, k["key"])
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert await api.chat(other["key"]) == 200
    _, listed = await api.call("GET", "/admin/v1/keys")
    assert {k["name"] for k in listed["data"] if k["revoked"]} == {"parent", "child", "grandchild"}


async def test_a_user_key_cannot_take_a_name_a_live_key_has(api: Api) -> None:
    user = await api.mint("alice")
    status, body = await api.call("POST", "/admin/v1/keys", {"name": "admin"}, user["key"])
    assert status == 409 and body["error"]["code"] == "conflict"
    assert body["error"]["param"] == "name"
    status, found = await api.call("GET", "/admin/v1/keys/admin")
    assert status == 200 and found["scope"] == "admin"

    status, rotated = await api.call("POST", f"/admin/v1/keys/{user['id']}/rotate")
    assert status == 201 and rotated["name"] == "alice"
    status, found = await api.call("GET", "/admin/v1/keys/alice")
    assert status == 200 and found["id"] == rotated["id"]


# --- a user key sees its own family and nothing else --------------------------------------------


@dataclass
class Family:
    """Two user keys an admin made; the first minted a child, which minted a grandchild."""

    alice: dict[str, Any]
    child: dict[str, Any]
    grandchild: dict[str, Any]
    bob: dict[str, Any]


@pytest.fixture
async def family(api: Api) -> Family:
    alice = await api.mint("alice")
    child = await api.mint("alice-ci", alice["key"])
    return Family(alice, child, await api.mint("alice-ci-nightly", child["key"]), await api.mint("bob"))


async def unknown_key_answer(api: Api, method: str, path: str, ref: str, key: str) -> tuple[int, Any]:
    """What `key` is told about a key that does not exist, as if it were `ref`."""
    status, body = await api.call(method, path.format(ref="key-nosuchkey"), key=key)
    return status, {**body["error"], "message": body["error"]["message"].replace("key-nosuchkey", ref)}


async def test_a_user_key_lists_itself_and_the_keys_minted_beneath_it(api: Api, family: Family) -> None:
    status, listed = await api.call("GET", "/admin/v1/keys", key=family.alice["key"])
    assert status == 200
    assert {k["name"] for k in listed["data"]} == {"alice", "alice-ci", "alice-ci-nightly"}
    assert all("hash" not in k and "key" not in k for k in listed["data"])
    _, listed = await api.call("GET", "/admin/v1/keys", key=family.child["key"])
    assert {k["name"] for k in listed["data"]} == {"alice-ci", "alice-ci-nightly"}
    # The grandparent sees the grandchild by id, name and prefix.
    for ref in (family.grandchild["id"], "alice-ci-nightly", family.grandchild["prefix"]):
        status, shown = await api.call("GET", f"/admin/v1/keys/{ref}", key=family.alice["key"])
        assert status == 200 and shown["id"] == family.grandchild["id"]


@pytest.mark.parametrize("method,path", [("GET", "/admin/v1/keys/{ref}"),
                                         ("POST", "/admin/v1/keys/{ref}/revoke"),
                                         ("GET", "/admin/v1/usage?key={ref}")])
async def test_another_keys_id_name_or_prefix_answers_as_a_key_that_does_not_exist(
    api: Api, family: Family, method: str, path: str
) -> None:
    # The child asks about its parent, a sibling family, and the admin key, every way it can.
    admin = (await api.call("GET", "/admin/v1/keys/admin"))[1]
    for other in (family.alice, family.bob, admin):
        for ref in (other["id"], other["name"], other["prefix"]):
            status, body = await api.call(method, path.format(ref=ref), key=family.child["key"])
            assert (status, body["error"]) == await unknown_key_answer(
                api, method, path, ref, family.child["key"]), ref
            assert status == 404
    # Nothing was revoked on the way.
    _, listed = await api.call("GET", "/admin/v1/keys")
    assert not any(k["revoked"] for k in listed["data"])
    assert await api.chat(family.bob["key"]) == 200


async def test_a_user_key_revokes_what_it_minted_and_never_a_sibling(api: Api, family: Family) -> None:
    status, _ = await api.call("POST", f"/admin/v1/keys/{family.bob['id']}/revoke",
                               key=family.alice["key"])
    assert status == 404
    assert await api.chat(family.bob["key"]) == 200
    status, revoked = await api.call("POST", f"/admin/v1/keys/{family.grandchild['id']}/revoke",
                                     key=family.alice["key"])
    assert status == 200 and revoked["revoked"] and "key" not in revoked
    assert await api.chat(family.grandchild["key"]) == 401
    assert await api.chat(family.child["key"]) == 200


async def test_a_user_key_reads_the_usage_of_its_own_family_only(api: Api, family: Family) -> None:
    day = "2026-01-05"
    api.store.usage.add_usage([UsageRow(key_id=k["id"], model=MODEL, day=day, requests=i + 1)
                               for i, k in enumerate((family.alice, family.child, family.grandchild,
                                                      family.bob))])
    status, rows = await api.call("GET", "/admin/v1/usage", key=family.child["key"])
    assert status == 200
    assert {(r["key_id"], r["requests"]) for r in rows["data"]} == {
        (family.child["id"], 2), (family.grandchild["id"], 3)}
    status, rows = await api.call("GET", f"/admin/v1/usage?key={family.grandchild['name']}",
                                  key=family.alice["key"])
    assert status == 200 and [r["requests"] for r in rows["data"]] == [3]
    _, rows = await api.call("GET", "/admin/v1/usage")  # an admin key still sees everyone's
    assert len(rows["data"]) == 4


async def test_usage_rows_name_their_keys(api: Api, family: Family) -> None:
    api.store.usage.add_usage([UsageRow(key_id=k["id"], model=MODEL, day="2026-01-05", requests=1)
                               for k in (family.alice, family.bob)])
    _, rows = await api.call("GET", "/admin/v1/usage")
    assert {(r["key_id"], r["key_name"]) for r in rows["data"]} == {
        (family.alice["id"], family.alice["name"]), (family.bob["id"], family.bob["name"])}


async def test_a_user_key_still_cannot_rotate_even_its_own_keys(api: Api, family: Family) -> None:
    status, body = await api.call("POST", f"/admin/v1/keys/{family.child['id']}/rotate",
                                  key=family.alice["key"])
    assert status == 403 and body["error"]["code"] == "forbidden"


# --- a key cannot map the catalog -------------------------------------------------------------


async def test_a_model_the_key_may_not_use_answers_as_one_that_does_not_exist(api: Api) -> None:
    key = (await api.mint("narrow", models=["other-*"]))["key"]
    answers = []
    for model in (MODEL, "no-such-model"):
        resp = await api.client.post(
            "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
            json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        answers.append((resp.status, (await resp.json())["error"]))
    (status, hidden), (missing_status, missing) = answers
    assert status == missing_status == 404
    assert hidden == {**missing, "message": missing["message"].replace("no-such-model", MODEL)}
    assert hidden["code"] == "model_not_found"


# --- datetimes without a zone ------------------------------------------------------------------


async def test_an_expiry_without_a_zone_is_utc(api: Api) -> None:
    status, key = await api.call("POST", "/admin/v1/keys",
                                 {"name": "naive", "expires_at": "2999-01-02T03:04:05"})
    assert status == 201, key
    assert key["expires_at"] == "2999-01-02T03:04:05Z"
    status, key = await api.call("POST", "/admin/v1/keys",
                                 {"name": "aware", "expires_at": "2999-01-02T03:04:05+02:00"})
    assert status == 201 and key["expires_at"] == "2999-01-02T01:04:05Z"
    status, body = await api.call("POST", "/admin/v1/keys",
                                  {"name": "past", "expires_at": "2000-01-01T00:00:00"})
    assert status == 400 and body["error"]["param"] == "expires_at"


@pytest.mark.parametrize("since", ["2026-01-01", "2026-01-01T10:00:00", "2026-01-01T10:00:00+05:00"])
async def test_usage_and_verdicts_take_a_since_with_or_without_a_zone(api: Api, since: str) -> None:
    for path in ("/admin/v1/usage", "/admin/v1/guard/verdicts"):
        resp = await api.client.get(path, params={"since": since},
                                    headers={"Authorization": f"Bearer {api.admin}"})
        assert resp.status == 200, await resp.text()


async def test_a_since_that_is_no_date_is_a_400(api: Api) -> None:
    resp = await api.client.get("/admin/v1/usage", params={"since": "yesterday"},
                                headers={"Authorization": f"Bearer {api.admin}"})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "since"
