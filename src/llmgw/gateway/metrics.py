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
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.guard import JudgeLoad, VerdictRecord
from llmgw.gateway.upstream.table import RoutingTable

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
QUEUE_WAIT = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
JUDGE_SERVICE = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Family:
    """One metric family as a scrape shows it. Every family of the process is declared below and
    listed in `FAMILIES`, whichever collector yields it, so the reference can list them all."""

    name: str  # as declared; a counter's samples are shown as `name` + "_total"
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # a histogram's upper bounds (+Inf is added)
    # When the family is in a scrape, if not always (for the reference; not exposed).
    when: str = ""

    @property
    def sample_names(self) -> tuple[str, ...]:
        """The names its samples have in the text a scrape returns."""
        if self.kind == "counter":
            return (self.name + "_total",)
        if self.kind == "histogram":
            return tuple(self.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        return (self.name,)

    def counter(self, values: Mapping[Any, int]) -> CounterMetricFamily:
        """The family with one sample per label values (sorted)."""
        fam = CounterMetricFamily(self.name, self.help, labels=self.labels)
        for label_values, n in sorted(values.items()):
            fam.add_metric(list(label_values), n)
        return fam

    def gauge(self) -> GaugeMetricFamily:
        """The family, empty: the caller adds its samples."""
        return GaugeMetricFamily(self.name, self.help, labels=self.labels)


# What each label holds, in whichever family it appears.
LABELS: dict[str, str] = {
    "model": "The catalog model (or route) name the client asked for.",
    "status": "The HTTP status the client was answered with.",
    "key": "The calling key's visible prefix (`sk-llmgw-` and a few characters), never the key.",
    "api": "The API called: chat_completions, completions, embeddings, responses, messages, "
           "count_tokens or rerank.",
    "code": "The error code of the failure (see the error codes), or the HTTP status when it had none.",
    "policy": "The guard policy that asked for the judgment.",
    "judge": "The judge model's name.",
    "outcome": "A judgment's outcome: safe, unsafe, failed_timeout, failed_unparseable, "
               "failed_error or failed_shed; a tool call's: ok, error (the tool's own or the "
               "upstream's failure), blocked (the guard withheld it) or refused (over a limit).",
    "server": "The upstream MCP server's name in the catalog.",
    "tool": "The tool's name on its MCP server (without the `SERVER__` prefix clients see).",
    "source": "evaluated (the judge computed the prompt tokens) or cached (reused from its KV cache).",
    "route": "The route's name.",
    "target": "A catalog model the route sends requests to.",
    "from_target": "The target the request failed on.",
    "to_target": "The target it moved on to.",
    "reason": "The failure that moved it or retried it: connect, 5xx, timeout, 429 or context-length.",
    "tenant": "Whom busy slots are shared between: `team:` and the team's id, or `key:` and the "
              "id of a key outside teams.",
    "replica": "The replica's id (`llmgw ctl replica list`).",
    "result": "hit (answered from the response cache) or miss (answered by the upstream, and kept "
              "when it could be).",
    "node": "The node's id.",
    "index": "The GPU's index on its node, as NVML and `nvidia-smi` number them.",
    "uuid": "The GPU's UUID (`GPU-…`), as `CUDA_VISIBLE_DEVICES` takes it.",
    "class": "The GPU's class (`h200`, `a100-80gb`), as profiles' `gpu_class` names it.",
}

REQUESTS = Family("llmgw_requests", "counter",
                  "Data-plane requests, counted as they end, by model, status, key prefix and API",
                  ("model", "status", "key", "api"))
REQUEST_SECONDS = Family("llmgw_request_seconds", "histogram",
                         "Request latency, first byte in to last out", ("model",), LATENCY)
TTFT = Family("llmgw_time_to_first_token_seconds", "histogram",
              "Streamed requests: time from the request's arrival to the answer's first chunk",
              ("model",), LATENCY)
GATEWAY_ADDED = Family("llmgw_gateway_added_seconds", "histogram",
                       "Time llmgw spends before the upstream call (auth, limits, routing)",
                       ("model",), OVERHEAD)
UPSTREAM_ERRORS = Family("llmgw_upstream_errors", "counter",
                         "Requests answered with a 5xx (an upstream's failure, or llmgw's own such as "
                         "no ready replica), by model and error code", ("model", "code"))
JUDGMENTS = Family("llmgw_guard_judgments", "counter", "Guard judgments, by policy, judge and outcome",
                   ("policy", "judge", "outcome"))
QUEUE_WAIT_SECONDS = Family("llmgw_queue_wait_seconds", "histogram",
                            "Time requests waited in the queue for a ready replica", ("model",),
                            QUEUE_WAIT)
COLD_STARTS = Family("llmgw_cold_starts", "counter",
                     "Replicas started for a model with requests waiting", ("model",))
EVICTIONS = Family("llmgw_evictions", "counter",
                   "Idle replicas stopped to make room for another model", ("model",))
REPLICAS_READY = Family("llmgw_replicas_ready", "gauge",
                        "Upstreams ready to take requests per model (its ready replicas, or a "
                        "remote provider's endpoint)", ("model",))
REQUESTS_IN_FLIGHT = Family("llmgw_requests_in_flight", "gauge",
                            "Requests sent to a model's upstreams and not answered yet", ("model",))
QUEUE_DEPTH = Family("llmgw_queue_depth", "gauge", "Requests waiting for a ready replica per model",
                     ("model",), when="For models served here (a remote provider's model never queues).")
FAIR_QUEUE_DEPTH = Family("llmgw_fair_queue_depth", "gauge",
                          "Requests held while every slot of the model's ready replicas is busy, "
                          "per tenant", ("model", "tenant"),
                          when="For each tenant with requests held in the server now.")
GUARD_QUEUE_DEPTH = Family("llmgw_guard_queue_depth", "gauge",
                           "Judgments waiting in this server for a free judge slot", ("judge",))
GUARD_IN_FLIGHT = Family("llmgw_guard_judgments_in_flight", "gauge", "Judgments on a judge slot now",
                         ("judge",))
GUARD_JUDGE_SLOTS = Family("llmgw_guard_judge_slots", "gauge", "Slots of the judge's ready replicas",
                           ("judge",))
GUARD_SHED = Family("llmgw_guard_shed", "counter",
                    "Judgments failed as failed_shed: not sent, they could not finish within their "
                    "budget", ("judge",))
JUDGE_PROMPT_TOKENS = Family("llmgw_guard_judge_prompt_tokens", "counter",
                             "Judge prompt tokens: evaluated, or reused from the slot's KV cache",
                             ("judge", "source"))
JUDGE_SERVICE_SECONDS = Family("llmgw_guard_judge_service_seconds", "histogram",
                               "Time a judge took to answer a judgment, from sending to the answer "
                               "(queueing not counted)", ("judge",), JUDGE_SERVICE)
CACHE_LOOKUPS = Family("llmgw_cache_lookups", "counter",
                       "Requests the response cache could answer, by model (or route) and result",
                       ("model", "result"), when="With the response cache on for the model.")
CACHE_SAVED_TOKENS = Family("llmgw_cache_saved_tokens", "counter",
                            "Tokens that answers from the response cache spared the upstream",
                            ("model",), when="With the response cache on for the model.")
MCP_CALLS = Family("llmgw_mcp_calls", "counter",
                   "MCP tool calls (`tools/call`), counted as they end, by server, tool and outcome",
                   ("server", "tool", "outcome"))
MCP_CALL_SECONDS = Family("llmgw_mcp_call_seconds", "histogram",
                          "MCP tool call latency through llmgw, admission to result, by server and "
                          "tool", ("server", "tool"), LATENCY)
MCP_INFLIGHT = Family("llmgw_mcp_inflight", "gauge", "MCP tool calls in flight now, by server",
                      ("server",))
UP = Family("llmgw_up", "gauge", "1 while this server runs")
# Yielded by other collectors of the process (gateway/route_metrics.py, gateway/shared_limits.py).
ROUTE_FALLBACKS = Family("llmgw_route_fallbacks", "counter",
                         "Requests a route moved on to its next target",
                         ("route", "from_target", "to_target", "reason"))
ROUTE_RETRIES = Family("llmgw_route_retries", "counter", "Retries on the same target of a route",
                       ("route", "target", "reason"))
ROUTE_COOLDOWNS = Family("llmgw_route_cooldowns", "counter",
                         "Cooldowns started after repeated failures", ("route", "target"))
ROUTE_COOLING_DOWN = Family("llmgw_route_target_cooling_down", "gauge",
                            "1 while a route's target is skipped after failures", ("route", "target"))
LIMITS_DEGRADED = Family("llmgw_limits_degraded", "gauge",
                         "1 while the shared limit store (Redis) does not answer and limits fall "
                         "back or refuse", when="With `[limits] redis_url` set.")
# Yielded by gateway/gpu_metrics.py, from the nodes' last reports.
_GPU = ("node", "index", "uuid", "class")
_GPU_WHEN = "For each GPU found through NVIDIA's driver on a node that reports (not lost)."
GPU_UTILIZATION = Family("llmgw_gpu_utilization_ratio", "gauge",
                         "Share of the last sample period a GPU was busy (0 to 1), at its node's "
                         "last report", _GPU, when=_GPU_WHEN)
GPU_MEMORY_USED = Family("llmgw_gpu_memory_used_bytes", "gauge",
                         "GPU memory in use, by any process, at its node's last report", _GPU,
                         when=_GPU_WHEN)
GPU_MEMORY_TOTAL = Family("llmgw_gpu_memory_total_bytes", "gauge", "A GPU's memory", _GPU,
                          when=_GPU_WHEN)
GPU_TEMPERATURE = Family("llmgw_gpu_temperature_celsius", "gauge",
                         "A GPU's temperature at its node's last report", _GPU, when=_GPU_WHEN)

# What each ready replica of llmgw's engines reports (`replica_signals`): the signals Kubernetes'
# inference gateways pick a server by.
_SIGNALS_WHEN = "For each ready replica of llmgw's own engines that answered its last poll."
REPLICA_QUEUED = Family("llmgw_replica_queued_requests", "gauge",
                        "Requests waiting for a slot of the replica's engine (llama.cpp's "
                        "requests_deferred)", ("model", "replica"), when=_SIGNALS_WHEN)
REPLICA_RUNNING = Family("llmgw_replica_running_requests", "gauge",
                         "Requests the replica's engine is processing (llama.cpp's "
                         "requests_processing)", ("model", "replica"), when=_SIGNALS_WHEN)
REPLICA_KV_CACHE = Family("llmgw_replica_kv_cache_usage_ratio", "gauge",
                          "Share of the replica's KV cache its running requests hold, 0 to 1",
                          ("model", "replica"), when=_SIGNALS_WHEN)

# Every family a scrape of a server may show, in the order it shows them.
FAMILIES: tuple[Family, ...] = (
    REQUESTS, REQUEST_SECONDS, TTFT, GATEWAY_ADDED, UPSTREAM_ERRORS, JUDGMENTS, QUEUE_WAIT_SECONDS,
    COLD_STARTS, EVICTIONS, REPLICAS_READY, REQUESTS_IN_FLIGHT, QUEUE_DEPTH, FAIR_QUEUE_DEPTH,
    GUARD_QUEUE_DEPTH, GUARD_IN_FLIGHT, GUARD_JUDGE_SLOTS, GUARD_SHED, JUDGE_PROMPT_TOKENS,
    JUDGE_SERVICE_SECONDS, CACHE_LOOKUPS, CACHE_SAVED_TOKENS, MCP_CALLS, MCP_CALL_SECONDS,
    MCP_INFLIGHT, UP,
    ROUTE_FALLBACKS, ROUTE_RETRIES, ROUTE_COOLDOWNS, ROUTE_COOLING_DOWN, LIMITS_DEGRADED,
    GPU_UTILIZATION, GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_TEMPERATURE,
    REPLICA_QUEUED, REPLICA_RUNNING, REPLICA_KV_CACHE,
)

# One worker's counters, JSON-able: what a worker sends the one that was scraped.
MetricsState = dict[str, Any]
# (`mcp_inflight` is a gauge, but summed over workers as the counters are.)
_COUNTERS = ("requests", "upstream_errors", "judgments", "cold_starts", "evictions",
             "judge_prompt_tokens", "cache_lookups", "cache_saved_tokens", "mcp_calls",
             "mcp_inflight")
_HISTOGRAMS = ("queue_waits", "latency", "ttft", "overhead", "judge_service", "mcp_seconds")
# Joins a histogram's label values into its one key, for families with several labels (no
# model, server or tool name holds it).
_JOIN = "\x1f"


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

    def family(self, declared: Family) -> HistogramMetricFamily:
        """`declared`'s family with this histogram's buckets, one series per label value."""
        fam = HistogramMetricFamily(declared.name, declared.help, labels=declared.labels)
        for value, counts in sorted(self.counts.items()):
            running, buckets = 0, []
            for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
                running += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            fam.add_metric(value.split(_JOIN), buckets, self.sums[value])
        return fam


class Metrics(Collector):
    """One per server process, registered in its own registry."""

    def __init__(self, table: Callable[[], RoutingTable], *,
                 queued: Callable[[], Mapping[str, int]] = dict,
                 judges: Callable[[], Mapping[str, JudgeLoad]] = dict,
                 held: Callable[[], Mapping[tuple[str, str], int]] = dict) -> None:
        """`queued` gives the requests waiting per model in this server's queue, `judges` each
        judge's slots, queue and shed count in this server's judge admission, `held` the
        requests held per model and tenant while the model's slots are all busy."""
        self._table = table
        self._queued = queued
        self._held = held
        self._judges = judges
        self.judge_service = Histogram(JUDGE_SERVICE_SECONDS.buckets)
        self.judge_prompt_tokens: dict[tuple[str, ...], int] = defaultdict(int)
        self.cold_starts: dict[tuple[str, ...], int] = defaultdict(int)
        self.evictions: dict[tuple[str, ...], int] = defaultdict(int)
        self.queue_waits = Histogram(QUEUE_WAIT_SECONDS.buckets)
        self.requests: dict[tuple[str, ...], int] = defaultdict(int)
        self.upstream_errors: dict[tuple[str, ...], int] = defaultdict(int)
        self.judgments: dict[tuple[str, ...], int] = defaultdict(int)
        self.latency = Histogram(REQUEST_SECONDS.buckets)
        self.ttft = Histogram(TTFT.buckets)
        self.overhead = Histogram(GATEWAY_ADDED.buckets)
        self.cache_lookups: dict[tuple[str, ...], int] = defaultdict(int)
        self.cache_saved_tokens: dict[tuple[str, ...], int] = defaultdict(int)
        self.mcp_calls: dict[tuple[str, ...], int] = defaultdict(int)
        self.mcp_seconds = Histogram(MCP_CALL_SECONDS.buckets)
        self.mcp_inflight: dict[tuple[str, ...], int] = defaultdict(int)
        # Requests in flight per model in the other workers (set only on a merged copy).
        self._in_flight_elsewhere: dict[str, int] = {}
        # Collectors of other parts of this process (routes' cooldowns), shown beside these.
        self._extras: list[Collector] = []
        # What those collectors read before a scrape (the nodes' GPUs from the store).
        self._refreshers: list[Callable[[], Awaitable[None]]] = []
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def held(self) -> dict[tuple[str, str], int]:
        """The requests held per (model, tenant) while the model's slots are all busy, only
        where some are (every worker's, on a merged copy)."""
        return {k: n for k, n in sorted(self._held().items()) if n}

    def add_collector(self, collector: Collector) -> None:
        """Show `collector`'s metrics in every scrape of this process, merged or not (its
        figures are this process's own: they are not summed over workers)."""
        self._extras.append(collector)
        self.registry.register(collector)

    def add_refresher(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """Await `refresh` before each scrape (`refresh`): a collector's reads that may wait."""
        self._refreshers.append(refresh)

    async def refresh(self) -> None:
        """Bring what the collectors show up to date; call before `render`."""
        for refresh in self._refreshers:
            await refresh()

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

    def cache_lookup(self, model: str, hit: bool, saved: int = 0) -> None:
        """The response cache answered a request of `model` (sparing `saved` tokens), or not."""
        self.cache_lookups[(model, "hit" if hit else "miss")] += 1
        if hit:
            self.cache_saved_tokens[(model,)] += saved

    def tool_call_started(self, server: str) -> None:
        """An MCP tool call to `server` began (admission included)."""
        self.mcp_inflight[(server,)] += 1

    def tool_call(self, server: str, tool: str, outcome: str, seconds: float) -> None:
        """An MCP tool call to `server` ended with `outcome` after `seconds`."""
        self.mcp_inflight[(server,)] -= 1
        self.mcp_calls[(server, tool, outcome)] += 1
        # A tool's name is its upstream's word: never let it split the histogram's labels.
        self.mcp_seconds.observe(f"{server}{_JOIN}{tool.replace(_JOIN, ' ')}", seconds)

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
        out["held"] = [[model, tenant, n] for (model, tenant), n in self._held().items()]
        out["judges"] = {judge: load.model_dump() for judge, load in self._judges().items()}
        return out

    def render(self, others: Iterable[MetricsState] = ()) -> bytes:
        """The Prometheus text: this worker's metrics, summed with the `others`' states."""
        others = list(others)
        if not others:
            return generate_latest(self.registry)
        return generate_latest(merged(self, others).registry)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        yield REQUESTS.counter(self.requests)
        yield self.latency.family(REQUEST_SECONDS)
        yield self.ttft.family(TTFT)
        yield self.overhead.family(GATEWAY_ADDED)
        yield UPSTREAM_ERRORS.counter(self.upstream_errors)
        yield JUDGMENTS.counter(self.judgments)
        yield self.queue_waits.family(QUEUE_WAIT_SECONDS)
        yield COLD_STARTS.counter(self.cold_starts)
        yield EVICTIONS.counter(self.evictions)
        ready, inflight, depth = REPLICAS_READY.gauge(), REQUESTS_IN_FLIGHT.gauge(), QUEUE_DEPTH.gauge()
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
        held = FAIR_QUEUE_DEPTH.gauge()
        for (model, tenant), n in sorted(self._held().items()):
            held.add_metric([model, tenant], n)
        yield held
        yield from self._judge_families()
        yield CACHE_LOOKUPS.counter(self.cache_lookups)
        yield CACHE_SAVED_TOKENS.counter(self.cache_saved_tokens)
        yield MCP_CALLS.counter(self.mcp_calls)
        yield self.mcp_seconds.family(MCP_CALL_SECONDS)
        mcp_inflight = MCP_INFLIGHT.gauge()
        for (server,), n in sorted(self.mcp_inflight.items()):
            mcp_inflight.add_metric([server], n)
        yield mcp_inflight
        up = UP.gauge()
        up.add_metric([], 1)
        yield up

    def _judge_families(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        loads = self._judges()
        queue, in_flight = GUARD_QUEUE_DEPTH.gauge(), GUARD_IN_FLIGHT.gauge()
        slots = GUARD_JUDGE_SLOTS.gauge()
        shed = GUARD_SHED.counter({})
        for judge, load in sorted(loads.items()):
            queue.add_metric([judge], load.queued)
            in_flight.add_metric([judge], load.in_flight)
            slots.add_metric([judge], load.slots)
            shed.add_metric([judge], load.shed)
        yield queue
        yield in_flight
        yield slots
        yield shed
        yield JUDGE_PROMPT_TOKENS.counter(self.judge_prompt_tokens)
        yield self.judge_service.family(JUDGE_SERVICE_SECONDS)


def merged(own: Metrics, others: Iterable[MetricsState]) -> Metrics:
    """A copy of `own` with every state in `others` added: counters and histograms summed, and
    the requests in flight, queued and held per model too (ready replicas are the routing
    table's, the same in every worker)."""
    queued: dict[str, int] = defaultdict(int, own._queued())
    judges: dict[str, JudgeLoad] = dict(own._judges())
    held: dict[tuple[str, str], int] = defaultdict(int, own._held())
    out = Metrics(own._table, queued=lambda: queued, judges=lambda: judges, held=lambda: held)
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
        for model, tenant, n in state.get("held", ()):
            held[(str(model), str(tenant))] += int(n)
        for judge, fields in state.get("judges", {}).items():
            load = JudgeLoad.model_validate(fields)
            mine = judges.get(judge)
            judges[judge] = load if mine is None else mine.plus(load)
    return out

