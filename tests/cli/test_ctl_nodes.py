"""`llmgw ctl node …` against the real demo server.

The server is shared by the whole session, and draining its own node would stop the demo model,
so these tests operate on extra nodes written into its database as if their agents had reported.
They have no cores and no memory, so the keeper never places a replica on them, and each test
removes its nodes again.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmgw.core.protocol.nodes import NodeDetailOut
from llmgw.core.settings import load
from llmgw.core.types import Gpu, Node, Replica, ReplicaState
from llmgw.store.store import Store
from tests.cli.conftest import OfflineCtl
from tests.cli.test_ctl_guard import flat, row
from tests.conftest import DEMO
from tests.support.server_process import LlmgwServer


class Machines:
    """Nodes this test added to the demo server's database."""

    def __init__(self, server: LlmgwServer) -> None:
        self.server = server
        self.store = Store.open(load(server.data_dir).database_url(server.data_dir))
        self.ids: list[str] = []

    def add(self, *, age_s: float = 0, replicas: int = 0, labels: dict[str, str] | None = None) -> str:
        node_id = f"n-{uuid.uuid4().hex[:8]}"
        now = datetime.now(UTC)
        self.store.nodes.upsert(
            Node(id=node_id, address="10.0.0.7", cores=0, memory_gb=0.0, gpus={"l4": 2},
                 labels=labels or {}),
            now - timedelta(seconds=age_s),
        )
        # Replicas of no catalog model: the keeper marks them stopping, and with no agent on
        # the node to finish the stop their rows stay.
        for i in range(replicas):
            self.store.replicas.create(Replica(id=f"{node_id}-r{i}", model="elsewhere",
                                               node_id=node_id, state=ReplicaState.READY), now)
        self.ids.append(node_id)
        return node_id

    def close(self) -> None:
        for node_id in self.ids:
            self.store.nodes.remove(node_id)
        self.store.close()


@pytest.fixture
def machines(demo_server: LlmgwServer) -> Iterator[Machines]:
    m = Machines(demo_server)
    try:
        yield m
    finally:
        m.close()


def ctl_json(server: LlmgwServer, *args: str) -> Any:
    return json.loads(server.ctl("--json", *args).stdout)


def test_list_shows_status_hardware_labels_replicas_and_heartbeat(
    demo_server: LlmgwServer, machines: Machines
) -> None:
    ready = machines.add(replicas=2, labels={"zone": "eu-1"})
    lost = machines.add(age_s=7200)
    table = demo_server.ctl("node", "list").stdout
    cells = row(table, ready)
    assert cells[1:8] == ["ready", "10.0.0.7", "0", "0.0", "l4×2", "zone=eu-1", "2"]
    assert re.fullmatch(r"\d+s ago", cells[8]), cells
    assert row(table, lost)[1] == "lost" and row(table, lost)[8] == "2h ago"
    assert row(table, "local")[1] == "ready"  # the server's own node
    data = {n["id"]: n for n in ctl_json(demo_server, "node", "list")["data"]}
    assert data[lost]["status"] == "lost" and data[ready]["replica_count"] == 2


def test_show_lists_the_nodes_replicas(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(replicas=1)
    out = demo_server.ctl("node", "show", node_id).stdout
    assert f"replicas on {node_id}" in out and f"{node_id}-r0" in out and "elsewhere" in out
    local = ctl_json(demo_server, "node", "show", "local")
    assert DEMO in {r["model"] for r in local["replicas"]}


def test_an_unknown_node_is_a_one_line_404(demo_server: LlmgwServer) -> None:
    for args in (("show", "ghost"), ("cordon", "ghost"), ("remove", "ghost")):
        proc = demo_server.ctl("node", *args, check=False)
        assert proc.returncode == 1, args
        assert "404" in proc.stderr and "node 'ghost' does not exist" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_label_sets_and_removes(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(labels={"old": "1"})
    out = demo_server.ctl("node", "label", node_id, "zone=eu-1", "gpu-node=", "old-").stdout
    assert f"node {node_id}: labels gpu-node=, zone=eu-1" in out
    proc = demo_server.ctl("node", "label", node_id, "bad key=x", check=False)
    assert proc.returncode == 1 and "400" in proc.stderr and "label key 'bad key'" in flat(proc.stderr)
    proc = demo_server.ctl("node", "label", node_id, "zone", check=False)
    assert proc.returncode == 2 and "key=value" in proc.stderr


def test_cordon_drain_uncordon(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(replicas=1)
    out = demo_server.ctl("node", "cordon", node_id).stdout
    assert f"node {node_id}: cordoned; no new replicas, 1 keep running" in out
    out = demo_server.ctl("node", "drain", node_id).stdout
    assert "draining, 1 replica(s) to move" in out
    assert row(demo_server.ctl("node", "list").stdout, node_id)[1] == "draining"
    out = demo_server.ctl("node", "uncordon", node_id).stdout
    assert f"node {node_id}: ready; takes new replicas" in out


def test_drain_wait_ends_when_the_node_is_empty(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add()
    out = demo_server.ctl("node", "drain", node_id, "--wait").stdout
    assert f"node {node_id}: drained, no replicas left" in out


def test_drain_wait_follows_the_replicas_leaving_and_ends_when_the_last_has(
        demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(replicas=1)

    def agent_stops_it() -> None:
        # What the node's agent would do: once the node is draining, its replica stops.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            node = machines.store.nodes.get(node_id)
            if node is not None and node.draining:
                machines.store.replicas.delete(f"{node_id}-r0")
                return
            time.sleep(0.05)

    stopper = threading.Thread(target=agent_stops_it)
    stopper.start()
    try:
        out = demo_server.ctl("node", "drain", node_id, "--wait").stdout
    finally:
        stopper.join()
    assert f"node {node_id}: drained, no replicas left" in out


def test_drain_wait_gives_up_after_its_timeout(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(replicas=1)  # no agent there ever finishes stopping it
    proc = demo_server.ctl("node", "drain", node_id, "--wait", "--timeout", "0", check=False)
    assert proc.returncode == 1
    assert f"draining {node_id}: 1 replica(s) left" in proc.stdout
    assert "still has 1 replica(s) after 0s" in flat(proc.stderr)


def test_remove_refuses_a_busy_node_unless_forced(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(replicas=1)
    proc = demo_server.ctl("node", "remove", node_id, check=False)
    assert proc.returncode == 1 and "409" in proc.stderr
    assert "drain it first" in flat(proc.stderr) and "Traceback" not in proc.stderr
    out = flat(demo_server.ctl("node", "remove", node_id, "--force").stdout)
    assert f"removed node {node_id}" in out and "registers again on its next report" in out
    assert node_id not in {n["id"] for n in ctl_json(demo_server, "node", "list")["data"]}


def test_a_lost_node_is_removed_without_force(demo_server: LlmgwServer, machines: Machines) -> None:
    node_id = machines.add(age_s=3600, replicas=1)
    demo_server.ctl("node", "remove", node_id)


def test_join_tokens(demo_server: LlmgwServer) -> None:
    name = f"join-{uuid.uuid4().hex[:6]}"
    out = demo_server.ctl("node", "token", "create", "--name", name, "--expires", "7d",
                          "--node", "gpu-7").stdout
    token = re.search(r"^\s+(sk-llmgw-\S+)$", out, re.MULTILINE)
    assert token, out
    # The secret never appears on a command line to copy (shell history, `ps`): the agent
    # reads it from its environment.
    assert "--token" not in out and out.count(token[1]) == 1
    assert "read -rs LLMGW_NODE_TOKEN && export LLMGW_NODE_TOKEN" in out
    assert f"llmgw node run --server {demo_server.url} --node-id gpu-7" in out
    assert "shown once" in out and "for node gpu-7" in flat(out)
    try:
        listed = ctl_json(demo_server, "node", "token", "list")["data"]
        assert name in {k["name"] for k in listed} and {k["scope"] for k in listed} == {"node"}
        assert row(demo_server.ctl("key", "list").stdout, listed[-1]["id"])[3] == "node"

        # The token is for the agent API only.
        proc = demo_server.ctl("--key", token[1], "model", "list", check=False)
        assert proc.returncode == 1 and "403" in proc.stderr
        with pytest.raises(urllib.error.HTTPError) as caught:
            demo_server.call("POST", "/v1/chat/completions",
                             {"model": DEMO, "messages": [{"role": "user", "content": "hi"}]},
                             key=token[1])
        assert caught.value.code == 403
    finally:
        out = demo_server.ctl("node", "token", "revoke", name).stdout
        assert f"revoked node token {name}" in out


def test_tokens_made_without_a_name_never_collide(demo_server: LlmgwServer) -> None:
    # Names of live keys are unique: two default names made within one second must differ.
    names = []
    for _ in range(2):
        out = demo_server.ctl("node", "token", "create").stdout
        found = re.search(r"^node token (node-\S+) \(", out, re.MULTILINE)
        assert found, out
        names.append(found[1])
    assert names[0] != names[1]
    for name in names:
        demo_server.ctl("node", "token", "revoke", name)


def test_token_revoke_leaves_other_keys_alone(demo_server: LlmgwServer) -> None:
    proc = demo_server.ctl("node", "token", "revoke", "admin", check=False)
    assert proc.returncode == 1 and "not a node token" in flat(proc.stderr)
    assert not ctl_json(demo_server, "key", "show", "admin")["revoked"]


def test_every_node_command_has_help(demo_server: LlmgwServer) -> None:
    for args in (("list",), ("show",), ("label",), ("cordon",), ("uncordon",), ("drain",),
                 ("remove",), ("token", "create"), ("token", "list"), ("token", "revoke")):
        out = flat(demo_server.ctl("node", *args, "--help").stdout)
        assert "Usage:" in out and len(out) > 200, args
    assert "registers again" in flat(demo_server.ctl("node", "remove", "--help").stdout)


def test_node_show_lists_each_gpu_as_its_last_report_measured_it(offline_ctl: OfflineCtl) -> None:
    h200 = Gpu(index=0, uuid="GPU-5c8a1e4b", name="NVIDIA H200", gpu_class="h200", memory_gb=139.8,
               free_gb=38.2, memory_used_gb=101.6, utilization=0.87, temperature_c=64,
               compute_capability="9.0")
    declared = Gpu(index=1, uuid="l4-0", gpu_class="l4")
    node = NodeDetailOut(id="gpu-1", cores=32, memory_gb=256.0, gpus={"h200": 1, "l4": 1},
                         devices=[h200, declared], status="ready", heartbeat_age_s=2.0,
                         replica_count=0, replicas=[])

    out = offline_ctl({"/admin/v1/nodes/gpu-1": node.model_dump(mode="json")}, "node", "show",
                      "gpu-1", columns=200)

    assert row(out, "0") == ["0", "h200", "NVIDIA H200", "GPU-5c8a1e4b", "101.6 / 139.8", "38.2",
                             "87%", "64 °C", "9.0"]
    assert row(out, "1") == ["1", "l4", "-", "l4-0", "declared", "-", "-", "-", "-"]
