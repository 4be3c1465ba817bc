"""Routes in `/metrics`: fallbacks, retries and cooldowns, from the router's plain counters."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.clock import Clock
from llmgw.core.routes import RouteSpec
from llmgw.gateway.metrics import ROUTE_COOLDOWNS, ROUTE_COOLING_DOWN, ROUTE_FALLBACKS, ROUTE_RETRIES
from llmgw.gateway.upstream.router import Router


class RouteMetrics(Collector):
    """Registered beside `Metrics` in the server's registry."""

    def __init__(self, router: Router, specs: Callable[[], Mapping[str, RouteSpec]],
                 clock: Clock) -> None:
        self._router = router
        self._specs = specs
        self._clock = clock

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        router = self._router
        yield ROUTE_FALLBACKS.counter(router.fallbacks)
        yield ROUTE_RETRIES.counter(router.retries)
        yield ROUTE_COOLDOWNS.counter(router.cooldowns_started)
        cooling = ROUTE_COOLING_DOWN.gauge()
        now = self._clock.monotonic()
        for name, spec in sorted(self._specs().items()):
            for t in spec.targets:
                cooling.add_metric([name, t.model],
                                   int(router.cooldowns.cooling(name, t.model, now)))
        yield cooling
