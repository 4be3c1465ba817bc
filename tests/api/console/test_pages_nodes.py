"""The nodes page through the real app: cordon, drain, labels and a join token shown once."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from llmgw.core.types import Gpu, Node
from tests.api.console.conftest import Install


async def node(install: Install, node_id: str = "local") -> dict[str, Any]:
    status, body = await install.api("GET", "/admin/v1/nodes")
    assert status == 200
    return next(n for n in body["data"] if n["id"] == node_id)  # type: ignore[no-any-return]


async def test_cordon_uncordon_and_drain_from_the_page(install: Install) -> None:
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/nodes")).text()
    assert 'class="cordon-node secondary" data-node="local"' in page
    assert 'hx-get="/ui/live/nodes"' in page
    token = await install.browser.csrf("/ui/nodes")
    headers = {"X-CSRF-Token": token, "HX-Request": "true"}
    resp = await install.browser.post("/ui/nodes/local/cordon", headers=headers)
    assert resp.headers["HX-Redirect"] == "/ui/nodes"
    assert (await node(install))["cordoned"]
    live = await (await install.browser.get("/ui/live/nodes")).text()
    assert 'class="uncordon-node secondary" data-node="local"' in live
    assert ">cordoned</td>" in live  # the status says it once, not "cordoned (cordoned)"
    await install.browser.post("/ui/nodes/local/uncordon", headers=headers)
    assert not (await node(install))["cordoned"]
    await install.browser.post("/ui/nodes/local/drain", headers=headers)
    assert (await node(install))["draining"]
    resp = await install.browser.post("/ui/nodes/local/reboot", headers=headers)
    assert resp.status == 404


async def test_labels_are_set_and_removed(install: Install) -> None:
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/nodes")
    resp = await install.browser.post("/ui/nodes/labels", {"csrf_token": token, "node": "local",
                                                           "set": "zone=eu, tier=gold", "remove": ""})
    assert resp.status == 303
    labels = (await node(install))["labels"]
    assert labels["zone"] == "eu" and labels["tier"] == "gold"
    await install.browser.post("/ui/nodes/labels", {"csrf_token": token, "node": "local", "remove": "tier"})
    assert "tier" not in (await node(install))["labels"]


async def test_a_join_token_is_shown_once(install: Install) -> None:
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/nodes")
    resp = await install.browser.post("/ui/nodes/join-token", {"csrf_token": token, "name": "gpu-box"})
    assert resp.status == 200
    page = await resp.text()
    secret = re.search(r'<code id="join-token">([^<]+)</code>', page)
    assert secret and 'data-copy="join-token"' in page
    status, keys = await install.api("GET", "/admin/v1/keys")
    assert next(k for k in keys["data"] if k["name"] == "gpu-box")["scope"] == "node"
    assert secret.group(1) not in await (await install.browser.get("/ui/nodes")).text()


async def test_the_nodes_page_shows_each_gpu_with_its_load_memory_and_temperature(
    install: Install,
) -> None:
    h200 = Gpu(index=0, uuid="GPU-5c8a1e4b", name="NVIDIA H200", gpu_class="h200", memory_gb=139.8,
               free_gb=38.2, memory_used_gb=101.6, utilization=0.87, temperature_c=64,
               compute_capability="9.0")
    install.store.nodes.upsert(Node(id="gpu-1", address="10.0.0.9", cores=32, memory_gb=256.0,
                                    gpus={"h200": 1}, devices=[h200]), datetime.now(UTC))
    await install.browser.signin(install.admin)

    page = await (await install.browser.get("/ui/nodes")).text()

    [cell] = re.findall(r'<div class="gpu" data-uuid="GPU-5c8a1e4b"[^>]*>(.*?)</div>', page)
    assert cell == "0: h200 · 87% · 101.6 / 139.8 GB · 64 °C"
