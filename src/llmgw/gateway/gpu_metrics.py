"""The nodes' GPUs in `/metrics`: utilisation, memory and temperature as each node's last report
measured them (an agent's sync, the embedded node's heartbeat)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.clock import Clock
from llmgw.core.types import Node
from llmgw.gateway.metrics import GPU_MEMORY_TOTAL, GPU_MEMORY_USED, GPU_TEMPERATURE, GPU_UTILIZATION

logger = logging.getLogger(__name__)
GIB = 2**30


class GpuMetrics(Collector):
    """Registered beside `Metrics`; `refresh` reads the nodes (from the store) before a scrape,
    so that the scrape itself never waits on the database. A node not heard from within
    `node_timeout` (lost) shows no GPUs: its figures would be stale."""

    def __init__(self, nodes: Callable[[], list[Node]], clock: Clock, node_timeout: timedelta) -> None:
        self._read = nodes
        self._clock = clock
        self._timeout = node_timeout
        self._nodes: list[Node] = []

    async def refresh(self) -> None:
        """Read the nodes again; when that fails, the scrape shows what was read last."""
        try:
            self._nodes = await asyncio.to_thread(self._read)
        except Exception as exc:  # the store down must not fail the whole scrape
            logger.warning("the nodes' GPUs could not be read for /metrics: %s", type(exc).__name__)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        busy, used, total, temperature = (GPU_UTILIZATION.gauge(), GPU_MEMORY_USED.gauge(),
                                          GPU_MEMORY_TOTAL.gauge(), GPU_TEMPERATURE.gauge())
        now = self._clock.now()
        for node in self._nodes:
            if node.heartbeat_at is None or now - node.heartbeat_at > self._timeout:
                continue
            for gpu in node.devices:
                if gpu.declared:  # `--gpu`: nothing was measured
                    continue
                labels = [node.id, str(gpu.index), gpu.uuid, gpu.gpu_class]
                total.add_metric(labels, round(gpu.memory_gb * GIB))
                if gpu.utilization is not None:
                    busy.add_metric(labels, gpu.utilization)
                if gpu.memory_used_gb is not None:
                    used.add_metric(labels, round(gpu.memory_used_gb * GIB))
                if gpu.temperature_c is not None:
                    temperature.add_metric(labels, gpu.temperature_c)
        yield busy
        yield used
        yield total
        yield temperature
