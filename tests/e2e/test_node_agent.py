"""A node agent on its own: it keeps serving while no server is reachable, and catches up after;
its engines take its own node's key only."""

from __future__ import annotations

from pathlib import Path

import httpx2
import openai
import pytest

from tests.support.cluster import Cluster, hold
from tests.support.pg import fresh_database
from tests.support.server_process import pid_alive


def chat(url: str, key: str) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=10)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return str(reply.choices[0].message.content)


@pytest.mark.timeout(180)
def test_replicas_keep_running_while_every_server_is_down(postgres_url: str, tmp_path: Path) -> None:
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2) as cluster:
        node = cluster.add_node("node-a", cores=2, memory_gb=4)
        cluster.wait_nodes_ready()
        first = cluster.servers[0]
        first.ctl("model", "add", "m", "--path", str(model_file), "--min", "1")
        [before] = cluster.wait_ready_replicas("m", 1)
        cluster.wait_routed("m", first.admin_key)
        answer = chat(first.url, first.admin_key)
        assert answer.startswith("fake reply from port")

        for server in cluster.servers:
            server.stop()
        cluster.wait("the agent to notice", lambda: "no server reachable" in node.log(), 10)
        # Its engine keeps running: nothing told it to stop, and servers may only be restarting.
        hold("the engine to keep running", lambda: pid_alive(before["pid"]) and node.running, 3)

        for server in cluster.servers:
            server.launch()
        for server in cluster.servers:
            server.wait_up()
        cluster.wait("the agent to reconnect", lambda: "connected to server" in node.log(), 15)

        [after] = cluster.wait_ready_replicas("m", 1)
        cluster.wait_routed("m", first.admin_key)
        # The same replica, the same process: servers coming back restart nothing.
        assert (after["id"], after["pid"], after["endpoint"]) == \
               (before["id"], before["pid"], before["endpoint"])
        assert after["restarts"] == 0
        for server in cluster.servers:
            assert chat(server.url, server.admin_key) == answer


@pytest.mark.timeout(180)
def test_a_leaked_join_token_opens_no_other_nodes_engines(postgres_url: str, tmp_path: Path) -> None:
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=1) as cluster:
        cluster.add_node("node-b", cores=2, memory_gb=4)
        # Node A's token leaked before its agent ever ran: the thief reports as node A.
        leaked = cluster.add_node("node-a", cores=2, memory_gb=4, start=False).token
        cluster.wait_nodes_ready("node-b")
        server = cluster.servers[0]
        server.ctl("model", "add", "m", "--path", str(model_file), "--min", "1")
        [replica] = cluster.wait_ready_replicas("m", 1)
        assert replica["node_id"] == "node-b"
        answer = server.call("POST", "/agent/v1/sync", key=leaked, body={
            "node": {"id": "node-a", "address": "127.0.0.66", "cores": 0, "memory_gb": 0},
            "agent": "thief"})
        node_a_key = answer["engine_key"]
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx2.post(replica["endpoint"] + "/chat/completions", json=request,
                              headers={"Authorization": f"Bearer {node_a_key}"}, timeout=10,
                              trust_env=False)
        assert refused.status_code == 401
        # The servers, with node B's own key, are served by it.
        cluster.wait_routed("m", server.admin_key)
        assert chat(server.url, server.admin_key).startswith("fake reply from port")
