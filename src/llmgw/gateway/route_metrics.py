"""Routes in `/metrics`: fallbacks, retries and cooldowns, from the router's plain counters."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.clock import Clock
from llmgw.core.routes import RouteSpec
from llmgw.gateway.routes import Router


class RouteMetrics(Collector):
    """Registered beside `Metrics` in the server's registry."""

    def __init__(self, router: Router, specs: Callable[[], Mapping[str, RouteSpec]],
                 clock: Clock) -> None:
        self._router = router
        self._specs = specs
        self._clock = clock

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        router = self._router
        yield _counter("llmgw_route_fallbacks", "Requests a route moved on to its next target",
                       ["route", "from_target", "to_target", "reason"], router.fallbacks)
        yield _counter("llmgw_route_retries", "Retries on the same target of a route",
                       ["route", "target", "reason"], router.retries)
        yield _counter("llmgw_route_cooldowns", "Cooldowns started after repeated failures",
                       ["route", "target"], router.cooldowns_started)
        cooling = GaugeMetricFamily("llmgw_route_target_cooling_down",
                                    "1 while a route's target is skipped after failures",
                                    labels=["route", "target"])
        now = self._clock.monotonic()
        for name, spec in sorted(self._specs().items()):
            for t in spec.targets:
                cooling.add_metric([name, t.model],
                                   int(router.cooldowns.cooling(name, t.model, now)))
        yield cooling


def _counter(name: str, doc: str, labels: list[str],
             values: Mapping[Any, int]) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for label_values, n in sorted(values.items()):
        fam.add_metric(list(label_values), n)
    return fam
