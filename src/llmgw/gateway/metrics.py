"""Prometheus metrics for the request path, the replicas and the guard."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.guard import VerdictRecord
from llmgw.gateway.routing import RoutingTable

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)


class _Live(Collector):
    """Values read at scrape time: replicas ready and requests in flight per model."""

    def __init__(self, table: Callable[[], RoutingTable]) -> None:
        self._table = table

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ready = GaugeMetricFamily("llmgw_replicas_ready", "Ready upstreams per model", labels=["model"])
        inflight = GaugeMetricFamily(
            "llmgw_requests_in_flight", "Requests waiting on upstreams per model (queue depth)",
            labels=["model"],
        )
        for name, route in sorted(self._table().routes.items()):
            ready.add_metric([name], len(route.upstreams))
            inflight.add_metric([name], sum(u.outstanding for u in route.upstreams))
        yield ready
        yield inflight


class Metrics:
    """One registry per server process."""

    def __init__(self, table: Callable[[], RoutingTable]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("llmgw_requests", "Data-plane requests", ["model", "status", "key"],
                                registry=r)
        self.latency = Histogram("llmgw_request_seconds", "Request latency, first byte in to last out",
                                 ["model"], buckets=_LATENCY, registry=r)
        self.ttft = Histogram("llmgw_time_to_first_token_seconds", "Streams: time to the first chunk",
                              ["model"], buckets=_LATENCY, registry=r)
        self.overhead = Histogram("llmgw_gateway_added_seconds",
                                  "Time llmgw spends before the upstream call (auth, limits, routing)",
                                  ["model"], buckets=_OVERHEAD, registry=r)
        self.upstream_errors = Counter("llmgw_upstream_errors", "Upstream failures", ["model", "code"],
                                       registry=r)
        self.judgments = Counter("llmgw_guard_judgments", "Guard judgments", ["policy", "judge", "outcome"],
                                 registry=r)
        self.up = Gauge("llmgw_up", "1 while this server runs", registry=r)
        self.up.set(1)
        r.register(_Live(table))

    def judged(self, record: VerdictRecord) -> None:
        self.judgments.labels(record.policy, record.judge, record.outcome.value).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
