"""`/admin/v1/nodes` on the real app, and node join tokens at the keys API and the data plane."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from llmgw.core.types import Replica, ReplicaState
from llmgw.store.store import Store
from tests.api.conftest import MakeInstall, call
from tests.api.test_errors import assert_openai_error
from tests.factories import node


@dataclass
class Api:
    """The real app on a fresh install (no models, guard off), its store and admin key."""

    client: TestClient[Any, Any]
    store: Store
    admin: str

    async def call(self, method: str, path: str, body: Any = None,
                   key: str | None = None) -> tuple[int, Any]:
        return await call(self.client, method, path, body,
                          {"Authorization": f"Bearer {key or self.admin}"})

    def add_node(self, node_id: str, *, age_s: float = 0, replicas: int = 0) -> None:
        """A node as if its agent had reported `age_s` seconds ago, with replicas placed on it.

        Its replicas belong to no catalog model: the keeper marks them stopping, and with no
        agent on that node to finish the stop, their rows stay, which is what these tests need."""
        now = datetime.now(UTC)
        self.store.nodes.upsert(node(node_id, gpus={"l4": 1}), now - timedelta(seconds=age_s))
        for i in range(replicas):
            self.store.replicas.create(
                Replica(id=f"{node_id}-r{i}", model="elsewhere", node_id=node_id,
                        state=ReplicaState.READY), now)


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[Api]:
    install = fresh_install()
    async with install.serve() as client:
        yield Api(client, install.store, install.admin_key)


async def test_the_list_shows_status_replicas_and_heartbeat_age(api: Api) -> None:
    api.add_node("worker-1", replicas=2)
    api.add_node("gone", age_s=3600)
    status, body = await api.call("GET", "/admin/v1/nodes")
    assert status == 200
    nodes = {n["id"]: n for n in body["data"]}
    assert nodes["local"]["status"] == "ready"  # the server's own embedded node
    assert nodes["worker-1"]["status"] == "ready" and nodes["worker-1"]["replica_count"] == 2
    assert nodes["worker-1"]["gpus"] == {"l4": 1}
    assert nodes["gone"]["status"] == "lost" and nodes["gone"]["heartbeat_age_s"] >= 3600


async def test_show_gives_the_node_and_its_replicas(api: Api) -> None:
    api.add_node("worker-1", replicas=1)
    status, body = await api.call("GET", "/admin/v1/nodes/worker-1")
    assert status == 200
    assert body["id"] == "worker-1" and [r["id"] for r in body["replicas"]] == ["worker-1-r0"]


async def test_cordon_drain_and_uncordon_show_in_the_status(api: Api) -> None:
    api.add_node("worker-1")
    status, body = await api.call("POST", "/admin/v1/nodes/worker-1/cordon")
    assert status == 200 and body["status"] == "cordoned" and body["cordoned"] is True
    _, body = await api.call("POST", "/admin/v1/nodes/worker-1/drain")
    assert body["status"] == "draining" and body["cordoned"] and body["draining"]
    _, body = await api.call("POST", "/admin/v1/nodes/worker-1/uncordon")
    assert body["status"] == "ready" and not body["cordoned"] and not body["draining"]


async def test_labels_are_set_and_removed(api: Api) -> None:
    api.add_node("worker-1")
    await api.call("POST", "/admin/v1/nodes/worker-1/labels", {"set": {"zone": "eu-1", "old": "1"}})
    status, body = await api.call("POST", "/admin/v1/nodes/worker-1/labels",
                                  {"set": {"tier": ""}, "remove": ["old"]})
    assert status == 200 and body["labels"] == {"zone": "eu-1", "tier": ""}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"set": {"bad key!": "x"}}, "label key 'bad key!'"),
        ({"set": {"zone": "a" * 64}}, "at most 63"),
        ({"set": {"zone": 5}}, "set.zone"),
        ({"sett": {}}, "sett"),
    ],
)
async def test_bad_labels_are_an_openai_shaped_400(api: Api, body: dict[str, Any], fragment: str) -> None:
    api.add_node("worker-1")
    status, got = await api.call("POST", "/admin/v1/nodes/worker-1/labels", body)
    assert status == 400
    assert_openai_error(got, None)
    assert fragment in got["error"]["message"]


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/admin/v1/nodes/ghost"),
    ("POST", "/admin/v1/nodes/ghost/cordon"),
    ("POST", "/admin/v1/nodes/ghost/drain"),
    ("DELETE", "/admin/v1/nodes/ghost?force=true"),
])
async def test_an_unknown_node_is_404(api: Api, method: str, path: str) -> None:
    status, body = await api.call(method, path)
    assert status == 404
    assert_openai_error(body, "node_not_found")
    assert "ghost" in body["error"]["message"]


async def test_a_busy_node_is_not_removed_without_force(api: Api) -> None:
    api.add_node("worker-1", replicas=1)
    status, body = await api.call("DELETE", "/admin/v1/nodes/worker-1")
    assert status == 409
    assert_openai_error(body, "node_in_use")
    assert "drain it first" in body["error"]["message"]
    status, body = await api.call("DELETE", "/admin/v1/nodes/worker-1?force=maybe")
    assert status == 400 and body["error"]["param"] == "force"
    status, body = await api.call("DELETE", "/admin/v1/nodes/worker-1?force=true")
    assert status == 200 and body == {"id": "worker-1", "removed": True}
    assert api.store.nodes.get("worker-1") is None
    assert api.store.replicas.list(node_id="worker-1") == []


async def test_a_lost_node_is_removed_without_force(api: Api) -> None:
    api.add_node("gone", age_s=3600, replicas=1)
    status, _ = await api.call("DELETE", "/admin/v1/nodes/gone")
    assert status == 200


async def test_a_user_key_gets_403_on_node_routes(api: Api) -> None:
    _, user = await api.call("POST", "/admin/v1/keys", {"name": "alice"})
    status, body = await api.call("GET", "/admin/v1/nodes", key=user["key"])
    assert status == 403
    assert_openai_error(body)


# --- node join tokens --------------------------------------------------------------------------


async def node_token(api: Api) -> str:
    status, body = await api.call("POST", "/admin/v1/keys", {"name": "join", "scope": "node"})
    assert status == 201 and body["scope"] == "node"
    return str(body["key"])


async def test_a_node_token_reaches_neither_models_nor_the_admin_api(api: Api) -> None:
    status, _ = await api.call("POST", "/admin/v1/models", {
        "name": "far", "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}})
    assert status == 201
    token = await node_token(api)
    # The whole data plane refuses it up front, before it can learn what the catalog holds
    # or have a judge read its text.
    for method, path, body in (
        ("POST", "/v1/chat/completions", {"model": "far", "messages": [{"role": "user", "content": "hi"}]}),
        ("POST", "/v1/completions", {"model": "far", "prompt": "hi"}),
        ("POST", "/v1/embeddings", {"model": "far", "input": "hi"}),
        ("POST", "/v1/moderations", {"input": "hi"}),
        ("GET", "/v1/models", None),
    ):
        status, answer = await api.call(method, path, body, key=token)
        assert status == 403, path
        assert_openai_error(answer, "forbidden")
        assert "agent API only" in answer["error"]["message"]
    for method, path in (("GET", "/admin/v1/models"), ("GET", "/admin/v1/nodes")):
        status, body = await api.call(method, path, key=token)
        assert status in (401, 403), path
        assert_openai_error(body)


async def test_a_node_token_cannot_mint_keys(api: Api) -> None:
    token = await node_token(api)
    status, body = await api.call("POST", "/admin/v1/keys", {"name": "sneaky"}, key=token)
    assert status == 403
    assert "node join token cannot mint" in body["error"]["message"]


async def test_a_user_key_cannot_mint_a_node_token(api: Api) -> None:
    _, user = await api.call("POST", "/admin/v1/keys", {"name": "alice"})
    status, body = await api.call("POST", "/admin/v1/keys", {"name": "join", "scope": "node"},
                                  key=user["key"])
    assert status == 403 and body["error"]["param"] == "scope"
    assert "need an admin key" in body["error"]["message"]


async def test_a_node_token_takes_no_models(api: Api) -> None:
    status, body = await api.call("POST", "/admin/v1/keys",
                                  {"name": "join", "scope": "node", "models": ["*"]})
    assert status == 400 and body["error"]["param"] == "models"


async def test_a_node_token_may_be_made_for_one_node(api: Api) -> None:
    status, body = await api.call("POST", "/admin/v1/keys",
                                  {"name": "join", "scope": "node", "node_id": "gpu-1"})
    assert status == 201 and body["node_id"] == "gpu-1"
    status, body = await api.call("POST", "/admin/v1/keys", {"name": "u", "node_id": "gpu-1"})
    assert status == 400 and body["error"]["param"] == "node_id"
