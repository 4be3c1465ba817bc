"""The overview through the real app: what an admin and a user see, and the live fragment."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from llmgw.api.appkeys import GATEWAY
from llmgw.gateway.usage import Tokens
from tests.api.console.conftest import Install
from tests.factories import h200_node, replica_placed

ADMIN_PARTS = ('id="servers"', 'id="nodes"', 'id="replicas"', 'id="traffic"', 'id="guard-state"')


async def test_an_admin_sees_servers_nodes_replicas_traffic_and_the_guard(install: Install) -> None:
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/")).text()
    assert all(part in page for part in ADMIN_PARTS)
    assert 'hx-get="/ui/live/overview"' in page and 'hx-trigger="every 2s"' in page
    assert 'data-node="local"' in page  # the embedded node
    assert "leader" in page
    live = await install.browser.get("/ui/live/overview")
    text = await live.text()
    assert all(part in text for part in ADMIN_PARTS)
    assert "<html" not in text  # a fragment, swapped into the page


async def test_a_user_sees_its_models_and_usage_and_nothing_of_the_cluster(install: Install) -> None:
    status, body = await install.api("POST", "/admin/v1/models", {
        "name": "mine", "source": {"kind": "remote", "base_url": "https://api.example.com/v1"}})
    assert status == 201, body
    status, body = await install.api("POST", "/admin/v1/models", {
        "name": "theirs", "source": {"kind": "remote", "base_url": "https://api.example.com/v1"}})
    assert status == 201, body
    user = await install.mint("alice", models=["mine"])
    await install.browser.signin(user["key"])
    page = await (await install.browser.get("/ui/")).text()
    assert 'data-model="mine"' in page and "theirs" not in page
    assert 'id="usage-summary"' in page
    assert not any(part in page for part in ADMIN_PARTS)
    assert "alice" in page.split('id="whoami"', 1)[1].split("</span>", 1)[0]


async def test_an_admin_sees_which_gpus_each_replica_runs_on(install: Install) -> None:
    box = h200_node("gpu-box", heartbeat_at=datetime.now(UTC))
    install.store.nodes.upsert(box, datetime.now(UTC))
    install.store.replicas.create(
        replica_placed("rep-gpu", "gemma3-270m", node_id="gpu-box", profile="gpu", gpus=1,
                       gpu_class="h200", devices=[box.devices[0].uuid]), datetime.now(UTC))
    await install.browser.signin(install.admin)

    page = await (await install.browser.get("/ui/")).text()

    assert '<td class="devices">h200:0</td>' in page


async def test_an_admin_sees_the_requests_held_per_team_while_a_model_is_busy(
        install: Install) -> None:
    status, team = await install.api("POST", "/admin/v1/teams", {"name": "research"})
    assert status == 201, team
    await install.browser.signin(install.admin)
    assert 'id="held"' not in await (await install.browser.get("/ui/live/overview")).text()

    share = install.server.app[GATEWAY].fair
    assert share is not None

    def one_slot() -> int:
        return 1

    running = await share.turn("demo", f"team:{team['id']}", 1.0, 100, one_slot)
    held = [asyncio.create_task(share.turn("demo", tenant, 1.0, 100, one_slot))
            for tenant in (f"team:{team['id']}", f"team:{team['id']}", "key:key-0a1b2c")]
    await asyncio.sleep(0)  # each takes its place in the queue
    page = await (await install.browser.get("/ui/live/overview")).text()
    rows = page.split('id="held"', 1)[1].split("</table>", 1)[0]
    mine = rows.split(f'data-tenant="team:{team["id"]}">', 1)[1].split("</tr>", 1)[0]
    assert mine == '<td>demo</td><td>team research</td><td class="held">2</td>'
    assert '<td>key key-0a1b2c</td><td class="held">1</td>' in rows

    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    running.ended(200, Tokens(5, 3))
    assert 'id="held"' not in await (await install.browser.get("/ui/live/overview")).text()
