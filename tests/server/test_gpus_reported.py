"""The embedded node's GPUs as the server shows them: in the node's row (the admin API, so `ctl
node show` and the console) and in `/metrics`, as each heartbeat measured them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from llmgw.core.settings import load
from llmgw.node.gpus import GpuFinder
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.store.store import Store
from tests.fakes.nvml import FULL_4090, H200, MIB, FakeNvml


@dataclass
class Rig:
    client: TestClient[Any, Any]
    headers: dict[str, str]
    server: Server
    nvml: FakeNvml

    async def gpus(self) -> dict[tuple[str, str], float]:
        """(metric, GPU index) → value, from a scrape."""
        resp = await self.client.get("/metrics", headers=self.headers)
        assert resp.status == 200
        return {(s.name, s.labels["index"]): s.value
                for f in text_string_to_metric_families(await resp.text())
                if f.name.startswith("llmgw_gpu_") for s in f.samples}

    async def node(self) -> dict[str, Any]:
        resp = await self.client.get("/admin/v1/nodes/local", headers=self.headers)
        assert resp.status == 200
        return await resp.json()  # type: ignore[no-any-return]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    result = init(tmp_path / "data", guard=False)
    settings = load(tmp_path / "data")
    nvml = FakeNvml([H200, FULL_4090])
    server = Server(tmp_path / "data", settings, Store.open(settings.database_url(tmp_path / "data")),
                    gpus=GpuFinder(nvml))
    async with TestClient(TestServer(server.build_app())) as client:
        yield Rig(client, {"Authorization": f"Bearer {result.admin_key}"}, server, nvml)


async def test_the_embedded_nodes_gpus_are_in_its_row_and_in_the_metrics(rig: Rig) -> None:
    node = await rig.node()
    assert node["gpus"] == {"h200": 1, "rtx-4090": 1}
    h200, full = node["devices"]
    assert (h200["uuid"], h200["gpu_class"], h200["memory_gb"], h200["compute_capability"]) == (
        H200.uuid, "h200", 139.8, "9.0")
    assert (full["free_gb"], full["utilization"], full["temperature_c"]) == (0.0, 1.0, 83)

    # Memory as the report carries it: in GiB to the thousandth (about a megabyte).
    assert await rig.gpus() == pytest.approx({
        ("llmgw_gpu_utilization_ratio", "0"): 0.0, ("llmgw_gpu_utilization_ratio", "1"): 1.0,
        ("llmgw_gpu_memory_used_bytes", "0"): 632 * MIB, ("llmgw_gpu_memory_used_bytes", "1"): 24564 * MIB,
        ("llmgw_gpu_memory_total_bytes", "0"): 143155 * MIB,
        ("llmgw_gpu_memory_total_bytes", "1"): 24564 * MIB,
        ("llmgw_gpu_temperature_celsius", "0"): 31, ("llmgw_gpu_temperature_celsius", "1"): 83,
    }, abs=MIB)


async def test_each_heartbeat_measures_again_and_a_lost_gpu_leaves_the_report(rig: Rig) -> None:
    rig.nvml.set(0, utilization=88, temperature=67)
    rig.nvml.lose(1)

    await rig.server._heartbeat_once()  # the embedded node's next report

    node = await rig.node()
    assert node["gpus"] == {"h200": 1} and [d["index"] for d in node["devices"]] == [0]
    scraped = await rig.gpus()
    assert scraped[("llmgw_gpu_utilization_ratio", "0")] == 0.88
    assert scraped[("llmgw_gpu_temperature_celsius", "0")] == 67
    assert {index for _, index in scraped} == {"0"}
