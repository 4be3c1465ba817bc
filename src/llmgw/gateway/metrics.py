"""Prometheus metrics for the request path, the replicas and the guard.

The request path only bumps plain counters (no locks, no label lookups: at thousands of
requests a second prometheus_client's own metric objects cost a fifth of the throughput);
the Prometheus families are built from them when `/metrics` is scraped.

A server with several worker processes answers a scrape with the sum of them all: each worker
gives its counters as a plain `MetricsState` (`Metrics.state`), and the worker that was scraped
renders its own merged with the others' (`Metrics.render`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.guard import JudgeLoad, VerdictRecord
from llmgw.gateway.routing import RoutingTable

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
QUEUE_WAIT = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
JUDGE_SERVICE = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)

# One worker's counters, JSON-able: what a worker sends the one that was scraped.
MetricsState = dict[str, Any]
_COUNTERS = ("requests", "upstream_errors", "judgments", "cold_starts", "evictions",
             "judge_prompt_tokens")
_HISTOGRAMS = ("queue_waits", "latency", "ttft", "overhead", "judge_service")


class Histogram:
    """Bucket counts and a sum per label value."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = defaultdict(float)

    def observe(self, label: str, value: float) -> None:
        counts = self.counts.get(label)
        if counts is None:
            counts = self.counts[label] = [0] * (len(self.bounds) + 1)
        counts[bisect_left(self.bounds, value)] += 1
        self.sums[label] += value

    def state(self) -> dict[str, list[float]]:
        """Each label's bucket counts followed by its sum."""
        return {label: [*counts, self.sums[label]] for label, counts in self.counts.items()}

    def add(self, state: Mapping[str, list[float]]) -> None:
        """Add another worker's `state` of the same histogram."""
        width = len(self.bounds) + 1
        for label, values in state.items():
            if len(values) != width + 1:
                continue  # another version's buckets: not summable
            counts = self.counts.setdefault(label, [0] * width)
            for i in range(width):
                counts[i] += int(values[i])
            self.sums[label] += float(values[width])

    def family(self, name: str, doc: str, label: str) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=[label])
        for value, counts in sorted(self.counts.items()):
            running, buckets = 0, []
            for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
                running += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            fam.add_metric([value], buckets, self.sums[value])
        return fam


class Metrics(Collector):
    """One per server process, registered in its own registry."""

    def __init__(self, table: Callable[[], RoutingTable], *,
                 queued: Callable[[], Mapping[str, int]] = dict,
                 judges: Callable[[], Mapping[str, JudgeLoad]] = dict) -> None:
        """`queued` gives the requests waiting per model in this server's queue, `judges` each
        judge's slots, queue and shed count in this server's judge admission."""
        self._table = table
        self._queued = queued
        self._judges = judges
        self.judge_service = Histogram(JUDGE_SERVICE)
        self.judge_prompt_tokens: dict[tuple[str, ...], int] = defaultdict(int)
        self.cold_starts: dict[tuple[str, ...], int] = defaultdict(int)
        self.evictions: dict[tuple[str, ...], int] = defaultdict(int)
        self.queue_waits = Histogram(QUEUE_WAIT)
        self.requests: dict[tuple[str, ...], int] = defaultdict(int)
        self.upstream_errors: dict[tuple[str, ...], int] = defaultdict(int)
        self.judgments: dict[tuple[str, ...], int] = defaultdict(int)
        self.latency = Histogram(LATENCY)
        self.ttft = Histogram(LATENCY)
        self.overhead = Histogram(OVERHEAD)
        # Requests in flight per model in the other workers (set only on a merged copy).
        self._in_flight_elsewhere: dict[str, int] = {}
        # Collectors of other parts of this process (routes' cooldowns), shown beside these.
        self._extras: list[Collector] = []
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def add_collector(self, collector: Collector) -> None:
        """Show `collector`'s metrics in every scrape of this process, merged or not (its
        figures are this process's own: they are not summed over workers)."""
        self._extras.append(collector)
        self.registry.register(collector)

    def request(self, model: str, status: int, key_prefix: str, api: str, latency_s: float,
                overhead_s: float, ttft_s: float | None, error_code: str) -> None:
        """One data-plane request of `api` (chat_completions, messages, …), as it ended."""
        self.requests[(model, str(status), key_prefix, api)] += 1
        self.latency.observe(model, latency_s)
        self.overhead.observe(model, overhead_s)
        if ttft_s is not None:
            self.ttft.observe(model, ttft_s)
        if status >= 500:
            self.upstream_errors[(model, error_code or str(status))] += 1

    def queue_wait(self, model: str, seconds: float) -> None:
        """One request left the queue (answered, failed or gone) after `seconds`."""
        self.queue_waits.observe(model, seconds)

    def cold_start(self, model: str) -> None:
        """The leader placed a replica for a model that had none ready and requests waiting."""
        self.cold_starts[(model,)] += 1

    def evicted(self, model: str) -> None:
        """The leader stopped an idle replica of `model` to make room for another model."""
        self.evictions[(model,)] += 1

    def judge_served(self, judge: str, seconds: float) -> None:
        """A judge answered a judgment `seconds` after it was sent (queueing not counted)."""
        self.judge_service.observe(judge, seconds)

    def judge_prompt(self, judge: str, evaluated: int, cached: int) -> None:
        """A judge evaluated `evaluated` prompt tokens and reused `cached` from its KV cache."""
        self.judge_prompt_tokens[(judge, "evaluated")] += evaluated
        self.judge_prompt_tokens[(judge, "cached")] += cached

    def judged(self, record: VerdictRecord) -> None:
        self.judgments[(record.policy, record.judge, record.outcome.value)] += 1

    def state(self) -> MetricsState:
        """This worker's counters and gauges as plain data (for the worker that is scraped)."""
        out: MetricsState = {name: [[*labels, n] for labels, n in getattr(self, name).items()]
                             for name in _COUNTERS}
        for name in _HISTOGRAMS:
            out[name] = getattr(self, name).state()
        out["in_flight"] = {name: sum(u.outstanding for u in route.upstreams)
                            for name, route in self._table().routes.items()}
        out["queued"] = dict(self._queued())
        out["judges"] = {judge: load.model_dump() for judge, load in self._judges().items()}
        return out

    def render(self, others: Iterable[MetricsState] = ()) -> bytes:
        """The Prometheus text: this worker's metrics, summed with the `others`' states."""
        others = list(others)
        if not others:
            return generate_latest(self.registry)
        return generate_latest(merged(self, others).registry)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        yield _counter("llmgw_requests", "Data-plane requests", ["model", "status", "key", "api"],
                       self.requests)
        yield self.latency.family("llmgw_request_seconds",
                                  "Request latency, first byte in to last out", "model")
        yield self.ttft.family("llmgw_time_to_first_token_seconds",
                               "Streams: time to the first chunk", "model")
        yield self.overhead.family("llmgw_gateway_added_seconds",
                                   "Time llmgw spends before the upstream call (auth, limits, routing)",
                                   "model")
        yield _counter("llmgw_upstream_errors", "Upstream failures", ["model", "code"],
                       self.upstream_errors)
        yield _counter("llmgw_guard_judgments", "Guard judgments", ["policy", "judge", "outcome"],
                       self.judgments)
        yield self.queue_waits.family("llmgw_queue_wait_seconds",
                                      "Time requests waited in the queue for a ready replica", "model")
        yield _counter("llmgw_cold_starts", "Replicas started for a model with requests waiting",
                       ["model"], self.cold_starts)
        yield _counter("llmgw_evictions", "Idle replicas stopped to make room for another model",
                       ["model"], self.evictions)
        ready = GaugeMetricFamily("llmgw_replicas_ready", "Ready upstreams per model", labels=["model"])
        inflight = GaugeMetricFamily(
            "llmgw_requests_in_flight", "Requests waiting on upstreams per model (queue depth)",
            labels=["model"],
        )
        depth = GaugeMetricFamily("llmgw_queue_depth", "Requests waiting for a ready replica per model",
                                  labels=["model"])
        queued = self._queued()
        for name, route in sorted(self._table().routes.items()):
            ready.add_metric([name], len(route.upstreams))
            inflight.add_metric([name], sum(u.outstanding for u in route.upstreams)
                                + self._in_flight_elsewhere.get(name, 0))
            if not route.model.is_remote:
                depth.add_metric([name], queued.get(name, 0))
        yield ready
        yield inflight
        yield depth
        yield from self._judge_families()
        yield GaugeMetricFamily("llmgw_up", "1 while this server runs", value=1)


    def _judge_families(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        loads = self._judges()
        queue = GaugeMetricFamily("llmgw_guard_queue_depth",
                                  "Judgments waiting in this server for a free judge slot",
                                  labels=["judge"])
        in_flight = GaugeMetricFamily("llmgw_guard_judgments_in_flight",
                                      "Judgments on a judge slot now", labels=["judge"])
        slots = GaugeMetricFamily("llmgw_guard_judge_slots",
                                  "Slots of the judge's ready replicas", labels=["judge"])
        shed = CounterMetricFamily("llmgw_guard_shed",
                                   "Judgments failed as failed_shed: not sent, they could not "
                                   "finish within their budget", labels=["judge"])
        for judge, load in sorted(loads.items()):
            queue.add_metric([judge], load.queued)
            in_flight.add_metric([judge], load.in_flight)
            slots.add_metric([judge], load.slots)
            shed.add_metric([judge], load.shed)
        yield queue
        yield in_flight
        yield slots
        yield shed
        yield _counter("llmgw_guard_judge_prompt_tokens",
                       "Judge prompt tokens: evaluated, or reused from the slot's KV cache",
                       ["judge", "source"], self.judge_prompt_tokens)
        yield self.judge_service.family("llmgw_guard_judge_service_seconds",
                                        "Time a judge took to answer a judgment, from sending "
                                        "to the answer (queueing not counted)", "judge")


def merged(own: Metrics, others: Iterable[MetricsState]) -> Metrics:
    """A copy of `own` with every state in `others` added: counters and histograms summed, and
    the requests in flight and queued per model too (ready replicas are the routing table's,
    the same in every worker)."""
    queued: dict[str, int] = defaultdict(int, own._queued())
    judges: dict[str, JudgeLoad] = dict(own._judges())
    out = Metrics(own._table, queued=lambda: queued, judges=lambda: judges)
    for collector in own._extras:
        out.add_collector(collector)
    for state in (own.state(), *others):
        for name in _COUNTERS:
            counter = getattr(out, name)
            for row in state.get(name, ()):
                counter[tuple(str(v) for v in row[:-1])] += int(row[-1])
        for name in _HISTOGRAMS:
            getattr(out, name).add(state.get(name, {}))
    for state in others:
        for model, n in state.get("in_flight", {}).items():
            out._in_flight_elsewhere[model] = out._in_flight_elsewhere.get(model, 0) + int(n)
        for model, n in state.get("queued", {}).items():
            queued[model] += int(n)
        for judge, fields in state.get("judges", {}).items():
            load = JudgeLoad.model_validate(fields)
            mine = judges.get(judge)
            # Every worker admits up to a replica's slots on its own: the slots are the
            # replicas', the same in each worker, so they are not summed.
            judges[judge] = load if mine is None else mine.plus(load).model_copy(
                update={"slots": max(mine.slots, load.slots)})
    return out


def _counter(name: str, doc: str, labels: list[str], values: Mapping[tuple[str, ...], int]
             ) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for label_values, n in sorted(values.items()):
        fam.add_metric(list(label_values), n)
    return fam
