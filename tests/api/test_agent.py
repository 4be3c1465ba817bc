"""The agent API: join tokens only, malformed reports refused in OpenAI's shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.settings import load
from llmgw.core.types import KeyScope
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.store.store import Store
from tests.api.test_errors import assert_openai_error
from tests.factories import KEY_SECRET, NOW, api_key


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    """The real app (no embedded node) with a node token and a user key in its store."""
    init(tmp_path / "data", guard=False, embedded_node=False)
    settings = load(tmp_path / "data").model_copy(update={"key_secret": KEY_SECRET.hex()})
    store = Store.open(settings.database_url(tmp_path / "data"))
    keys: dict[str, str] = {}
    for scope in (KeyScope.NODE, KeyScope.USER):
        secret, key = api_key(scope=scope, name=scope.value)
        store.keys.create(key.model_copy(update={"created_at": NOW}))
        keys[scope.value] = secret
    app = Server(tmp_path / "data", settings, store).build_app()
    async with TestClient(TestServer(app)) as client:
        yield client, keys


NODE = {"id": "node-a", "address": "127.0.0.11", "cores": 4, "memory_gb": 8, "labels": {"role": "judge"}}


async def test_a_node_token_joins_and_gets_the_engine_key(api: Any) -> None:
    client, keys = api
    resp = await client.post("/agent/v1/sync", json={"node": NODE},
                             headers={"Authorization": f"Bearer {keys['node']}"})
    assert resp.status == 200
    body = await resp.json()
    assert body["assignments"] == [] and body["engine_key"].startswith("llmgw-engine-")
    nodes = (await client.get("/admin/v1/nodes", headers={"Authorization": f"Bearer {keys['node']}"}))
    # The token is for the agent API only: not the admin API.
    assert nodes.status in (401, 403)


async def test_a_user_key_cannot_pose_as_a_node(api: Any) -> None:
    client, keys = api
    resp = await client.post("/agent/v1/sync", json={"node": NODE},
                             headers={"Authorization": f"Bearer {keys['user']}"})
    assert resp.status == 403
    assert_openai_error(await resp.json(), "forbidden")


async def test_a_malformed_report_is_a_400_naming_the_field(api: Any) -> None:
    client, keys = api
    bad = {"node": {**NODE, "cores": -1}}
    resp = await client.post("/agent/v1/sync", json=bad,
                             headers={"Authorization": f"Bearer {keys['node']}"})
    assert resp.status == 400
    body = await resp.json()
    assert_openai_error(body)
    assert body["error"]["param"] == "node.cores"


async def test_a_second_agent_with_a_taken_node_id_gets_a_409(api: Any) -> None:
    client, keys = api
    auth = {"Authorization": f"Bearer {keys['node']}"}
    first = await client.post("/agent/v1/sync", json={"node": NODE, "agent": "agent-a"}, headers=auth)
    assert first.status == 200
    second = await client.post("/agent/v1/sync", json={"node": NODE, "agent": "agent-b"}, headers=auth)
    assert second.status == 409
    body = await second.json()
    assert_openai_error(body, "node_id_taken")
    assert "--node-id" in body["error"]["message"]
