"""The agent API: join tokens only, malformed reports refused in OpenAI's shape."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.settings import ControlSettings
from llmgw.core.types import KeyScope, Node, Replica, ReplicaState
from llmgw.node import hardware
from llmgw.node.gpus import GpuFinder
from llmgw.store.store import Store
from tests.api.conftest import FreshInstall, MakeInstall
from tests.api.test_errors import assert_openai_error
from tests.factories import KEY_SECRET, NOW, add_mcp_server, api_key, local_model, stdio_server
from tests.fakes.nvml import H200, FakeNvml


@dataclass
class Install:
    """A fresh install (no embedded node), and keys of each kind by name."""

    fresh: FreshInstall
    keys: dict[str, str]

    @property
    def store(self) -> Store:
        return self.fresh.store


@pytest.fixture
def install(fresh_install: MakeInstall) -> Iterator[Install]:
    # A request for a model with no ready replica waits this long for one (not the default 120 s).
    fresh = fresh_install(embedded_node=False, key_secret=KEY_SECRET.hex(),
                          control=ControlSettings(queue_timeout_s=2))
    store = fresh.store
    keys: dict[str, str] = {}
    # "node", "thief" and "other" are join tokens (the last two for the attacks below).
    for name, scope in (("node", KeyScope.NODE), ("user", KeyScope.USER),
                        ("admin", KeyScope.ADMIN), ("thief", KeyScope.NODE),
                        ("other", KeyScope.NODE)):
        # init made the key named "admin": names of live keys are unique.
        secret, key = api_key(scope=scope, name=f"test-{name}")
        store.keys.create(key.model_copy(update={"created_at": NOW}))
        keys[name] = secret
    yield Install(fresh, keys)


@pytest.fixture
async def api(
    install: Install,
) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    """The real app (no embedded node) with join tokens, a user and an admin key in its store."""
    async with install.fresh.serve() as client:
        yield client, install.keys


NODE = {"id": "node-a", "address": "127.0.0.11", "cores": 4, "memory_gb": 8, "labels": {"role": "judge"}}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_a_node_token_joins_and_gets_the_engine_key(api: Any) -> None:
    client, keys = api
    resp = await client.post("/agent/v1/sync", json={"node": NODE, "agent": "agent-a"},
                             headers={"Authorization": f"Bearer {keys['node']}"})
    assert resp.status == 200
    body = await resp.json()
    assert body["assignments"] == [] and body["engine_key"].startswith("llmgw-engine-")
    nodes = (await client.get("/admin/v1/nodes", headers={"Authorization": f"Bearer {keys['node']}"}))
    # The token is for the agent API only: not the admin API.
    assert nodes.status in (401, 403)


async def test_a_user_key_cannot_pose_as_a_node(api: Any) -> None:
    client, keys = api
    resp = await client.post("/agent/v1/sync", json={"node": NODE, "agent": "agent-a"},
                             headers={"Authorization": f"Bearer {keys['user']}"})
    assert resp.status == 403
    assert_openai_error(await resp.json(), "forbidden")


async def test_a_malformed_report_is_a_400_naming_the_field(api: Any) -> None:
    client, keys = api
    bad = {"node": {**NODE, "cores": -1}, "agent": "agent-a"}
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


# --- a join token speaks for its own node only -------------------------------------------------


async def sync(client: TestClient[Any, Any], secret: str, node: dict[str, Any],
               agent: str | None = "agent-a", **more: Any) -> tuple[int, Any]:
    body = {"node": node, **({"agent": agent} if agent is not None else {}), **more}
    resp = await client.post("/agent/v1/sync", json=body, headers=bearer(secret))
    return resp.status, await resp.json()


async def test_a_token_bound_to_one_node_cannot_report_as_another(api: Any, install: Install) -> None:
    client, keys = api
    assert (await sync(client, keys["node"], NODE))[0] == 200

    status, body = await sync(client, keys["node"], {**NODE, "id": "node-b"})
    assert status == 403
    assert_openai_error(body, "forbidden")
    assert body["error"]["param"] == "node.id" and "bound to node node-a" in body["error"]["message"]
    assert install.store.nodes.get("node-b") is None


async def test_another_token_cannot_take_over_a_node_and_its_traffic(api: Any, install: Install) -> None:
    client, keys = api
    assert (await sync(client, keys["node"], NODE, agent="agent-a"))[0] == 200
    # Another token, even with the victim's agent id (no secret) or none at all, and with the
    # node id left out: refused, and the node keeps its hardware.
    for agent in ("agent-a", "", None):
        status, body = await sync(client, keys["thief"], {**NODE, "cores": 64}, agent=agent)
        assert status in (400, 403), agent
        assert_openai_error(body)
    status, body = await sync(client, keys["thief"], {**NODE, "cores": 64}, agent="agent-a")
    assert status == 403 and "bound to another join token" in body["error"]["message"]
    node = install.store.nodes.get("node-a")
    assert node is not None and node.cores == 4


async def test_an_empty_or_missing_agent_id_is_a_400(api: Any) -> None:
    client, keys = api
    for agent in ("", None):
        status, body = await sync(client, keys["node"], NODE, agent=agent)
        assert status == 400, agent
        assert_openai_error(body)
        assert body["error"]["param"] == "agent"


async def test_no_token_reports_as_the_servers_embedded_node(api: Any, install: Install) -> None:
    client, keys = api
    status, body = await sync(client, keys["node"], {**NODE, "id": "local"})
    assert status == 403
    assert_openai_error(body, "forbidden")
    assert install.store.nodes.get("local") is None
    # Nor as any server's own node already registered.
    install.store.nodes.upsert(Node(id="box-1", cores=2, memory_gb=4), NOW)
    status, _ = await sync(client, keys["other"], {**NODE, "id": "box-1", "cores": 64})
    assert status == 403
    node = install.store.nodes.get("box-1")
    assert node is not None and node.cores == 2


async def test_an_admin_key_is_no_join_token(api: Any) -> None:
    client, keys = api
    status, body = await sync(client, keys["admin"], NODE)
    assert status == 403
    assert_openai_error(body, "forbidden")


async def test_tokens_racing_to_claim_one_node_bind_only_one(api: Any, install: Install) -> None:
    client, keys = api
    answers = await asyncio.gather(*(sync(client, keys[name], NODE)
                                      for name in ("node", "thief", "other")))
    assert sorted(status for status, _ in answers) == [200, 403, 403]
    bound = [k.node_id for k in install.store.keys.list() if k.scope == KeyScope.NODE]
    assert bound.count("node-a") == 1


class Recorder:
    """An OpenAI-speaking server that records the Authorization header of every request."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.server = TestServer(app, host="127.0.0.1")

    async def chat(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("Authorization"))
        return web.json_response({"id": "x", "object": "chat.completion", "choices": [],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                            "total_tokens": 2}})


async def test_traffic_and_the_engine_key_never_go_off_the_nodes_address(
    api: Any, install: Install, caplog: pytest.LogCaptureFixture,
) -> None:
    client, keys = api
    # node-a joins first: a replica on a node the leader's keeper has never heard of would be
    # forgotten by its next pass, racing the report below.
    status, _ = await sync(client, keys["node"], NODE)
    assert status == 200
    install.store.catalog.add(local_model("m1"), "test", NOW)
    install.store.replicas.create(
        Replica(id="r1", model="m1", node_id="node-a", profile="cpu",
                state=ReplicaState.STARTING), NOW)
    recorder = Recorder()
    await recorder.server.start_server()
    try:
        # node-a says it is at 127.0.0.11, and that its replica listens on another host.
        endpoint = str(recorder.server.make_url("/v1"))
        status, _ = await sync(client, keys["node"], NODE, replicas=[
            {"id": "r1", "state": "ready", "endpoint": endpoint}])
        assert status == 200
        resp = await client.post("/v1/chat/completions", headers=bearer(keys["user"]), json={
            "model": "m1", "messages": [{"role": "user", "content": "hi"}]})
        assert resp.status == 503
        assert_openai_error(await resp.json())
    finally:
        await recorder.server.close()
    assert recorder.seen == []
    # The refused report is said in the log (the row itself is the leader's keeper's to replace,
    # so it may be gone by now: tests/control/test_agents.py checks what is stored).
    assert "node node-a reported replica r1 listening off its address 127.0.0.11: refused" in (
        caplog.text)


async def test_each_node_gets_its_own_engine_key_and_requests_carry_their_nodes(
    api: Any, install: Install,
) -> None:
    client, keys = api
    node_a, node_b = {**NODE, "address": "127.0.0.1"}, {**NODE, "id": "node-b", "address": "127.0.0.1"}
    status, a = await sync(client, keys["node"], node_a)
    assert status == 200
    status, b = await sync(client, keys["other"], node_b, agent="agent-b")
    assert status == 200
    # Neither is the other's key, nor the one every engine used to share.
    assert len({a["engine_key"], b["engine_key"], install.store.install.engine_key()}) == 3
    install.store.catalog.add(local_model("m1"), "test", NOW)
    install.store.replicas.create(
        Replica(id="r1", model="m1", node_id="node-b", profile="cpu",
                state=ReplicaState.STARTING), NOW)
    recorder = Recorder()
    await recorder.server.start_server()
    try:
        status, _ = await sync(client, keys["other"], node_b, agent="agent-b", replicas=[
            {"id": "r1", "state": "ready", "endpoint": str(recorder.server.make_url("/v1"))}])
        assert status == 200
        resp = await client.post("/v1/chat/completions", headers=bearer(keys["user"]), json={
            "model": "m1", "messages": [{"role": "user", "content": "hi"}]})
        assert resp.status == 200, await resp.text()
    finally:
        await recorder.server.close()
    # Node B's replica is called with node B's key: node A's (a leaked token's) opens nothing there.
    assert recorder.seen == [f"Bearer {b['engine_key']}"]


async def test_a_node_learns_of_a_change_as_it_happens_not_at_its_next_round(api: Any) -> None:
    client, keys = api
    now = await (await client.get("/agent/v1/changes", headers=bearer(keys["node"]))).json()
    held = asyncio.create_task(client.get(
        "/agent/v1/changes", params={"since": str(now["revision"]), "wait": "25"},
        headers=bearer(keys["node"])))
    await asyncio.sleep(0)
    assert not held.done()  # nothing changed: the call is held open
    # An operator's change (here: a scale) is what the held call was waiting for.
    added = await client.post("/admin/v1/models", headers=bearer(keys["admin"]), json={
        "name": "m1", "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}})
    assert added.status == 201
    async with asyncio.timeout(10):  # far below the 25 s the call may be held
        answer = await (await held).json()
    assert answer["revision"] > now["revision"]


@pytest.mark.parametrize("query", [{"since": "x"}, {"wait": "soon"}, {"wait": "31"}, {"wait": "-1"}])
async def test_a_bad_changes_call_is_a_400_naming_the_parameter(api: Any, query: dict[str, str]) -> None:
    client, keys = api
    resp = await client.get("/agent/v1/changes", params=query, headers=bearer(keys["node"]))
    assert resp.status == 400
    body = await resp.json()
    assert_openai_error(body)
    assert body["error"]["param"] == next(iter(query))


async def test_only_join_tokens_may_watch_for_changes(api: Any) -> None:
    client, keys = api
    for name in ("user", "admin"):
        resp = await client.get("/agent/v1/changes", headers=bearer(keys[name]))
        assert resp.status == 403


async def test_an_agents_report_carries_its_gpus_to_the_node_row_and_the_metrics(api: Any) -> None:
    client, keys = api
    found = hardware.with_gpus(Node.model_validate(NODE), GpuFinder(FakeNvml([H200])).look().gpus)
    report = {"node": found.model_dump(mode="json"), "agent": "agent-a"}

    resp = await client.post("/agent/v1/sync", json=report, headers=bearer(keys["node"]))
    assert resp.status == 200

    nodes = await (await client.get("/admin/v1/nodes", headers=bearer(keys["admin"]))).json()
    [node] = [n for n in nodes["data"] if n["id"] == "node-a"]
    assert node["gpus"] == {"h200": 1}
    assert [(d["uuid"], d["memory_gb"], d["temperature_c"]) for d in node["devices"]] == [
        (H200.uuid, 139.8, 31)]
    scrape = await (await client.get("/metrics", headers=bearer(keys["admin"]))).text()
    assert (f'llmgw_gpu_temperature_celsius{{class="h200",index="0",node="node-a",uuid="{H200.uuid}"}} '
            '31.0') in scrape


async def test_a_gpu_reading_out_of_range_is_a_400_naming_the_field(api: Any) -> None:
    client, keys = api
    gpu = {"index": 0, "uuid": "GPU-1", "gpu_class": "h200", "memory_gb": 139.8, "utilization": 1.5}
    bad = {"node": {**NODE, "gpus": {"h200": 1}, "devices": [gpu]}, "agent": "agent-a"}

    resp = await client.post("/agent/v1/sync", json=bad, headers=bearer(keys["node"]))

    assert resp.status == 400
    assert (await resp.json())["error"]["param"] == "node.devices.0.utilization"


async def _joined(client: Any, keys: dict[str, str], token: str = "node") -> None:
    resp = await client.post("/agent/v1/sync", json={"node": NODE, "agent": "agent-a"},
                             headers=bearer(keys[token]))
    assert resp.status == 200


def _run(server: str, endpoint: str) -> dict[str, Any]:
    return {"server": server, "state": "ready", "endpoint": endpoint, "pid": 7, "restarts": 0}


async def test_a_node_is_told_only_its_stdio_servers_and_believed_only_about_them(
    api: Any, install: Install
) -> None:
    client, keys = api
    await _joined(client, keys)
    store = install.store
    add_mcp_server(store, stdio_server("mine", node="node-a"))
    add_mcp_server(store, stdio_server("theirs", node="node-b"))
    add_mcp_server(store, stdio_server("servers-own"))  # no node: a server's embedded one
    resp = await client.post("/agent/v1/mcp", headers=bearer(keys["node"]), json={"runs": [
        _run("mine", "http://127.0.0.11:9001/mcp"),
        # Another node's server: a node that claims it gets no traffic for it.
        _run("theirs", "http://127.0.0.11:9002/mcp"),
        _run("servers-own", "http://127.0.0.11:9003/mcp"),
    ]})
    assert resp.status == 200
    assert [s["name"] for s in (await resp.json())["servers"]] == ["mine"]
    assert {n: r.endpoint for n, r in store.mcp_runs.ready().items()} == {
        "mine": "http://127.0.0.11:9001/mcp"}
    assert [r.server for r in store.mcp_runs.list()] == ["mine"]


async def test_a_bridge_reported_off_the_nodes_address_gets_no_traffic(
    api: Any, install: Install
) -> None:
    client, keys = api
    await _joined(client, keys)
    add_mcp_server(install.store, stdio_server("mine", node="node-a"))
    resp = await client.post("/agent/v1/mcp", headers=bearer(keys["node"]),
                             json={"runs": [_run("mine", "http://10.6.6.6:9001/mcp")]})
    assert resp.status == 200
    assert install.store.mcp_runs.ready() == {}
    (run,) = install.store.mcp_runs.list()
    assert run.endpoint is None and "off its own address" in (run.last_error or "")


async def test_a_stopped_run_goes_and_a_token_without_a_node_is_refused(
    api: Any, install: Install
) -> None:
    client, keys = api
    resp = await client.post("/agent/v1/mcp", headers=bearer(keys["thief"]), json={})
    assert resp.status == 403
    await _joined(client, keys)
    add_mcp_server(install.store, stdio_server("mine", node="node-a"))
    await client.post("/agent/v1/mcp", headers=bearer(keys["node"]),
                      json={"runs": [_run("mine", "http://127.0.0.11:9001/mcp")]})
    resp = await client.post("/agent/v1/mcp", headers=bearer(keys["node"]),
                             json={"stopped": ["mine"]})
    assert resp.status == 200
    assert install.store.mcp_runs.list() == []
