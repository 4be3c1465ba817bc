"""What `/metrics` shows of on-demand models: queues, waits, cold starts and evictions."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmgw.core.guard import JudgeLoad
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from tests.factories import gemma_model, local_model, remote_model


def test_queues_waits_cold_starts_and_evictions_are_shown_per_model() -> None:
    table = RoutingTable({
        "gemma3-270m": Serving(gemma_model(replicas=0), ()),
        "other": Serving(local_model("other"), (Upstream("r1", "http://127.0.0.1:39001/v1"),)),
        "gpt-4o-mini": Serving(remote_model(), ()),
    })
    metrics = Metrics(lambda: table, queued=lambda: {"gemma3-270m": 3})

    metrics.cold_start("gemma3-270m")
    metrics.evicted("other")
    metrics.evicted("other")
    metrics.queue_wait("gemma3-270m", 7.5)
    text = metrics.render().decode()

    assert 'llmgw_queue_depth{model="gemma3-270m"} 3.0' in text
    assert 'llmgw_queue_depth{model="other"} 0.0' in text
    assert 'llmgw_queue_depth{model="gpt-4o-mini"}' not in text  # a provider never queues
    assert 'llmgw_cold_starts_total{model="gemma3-270m"} 1.0' in text
    assert 'llmgw_evictions_total{model="other"} 2.0' in text
    assert 'llmgw_queue_wait_seconds_bucket{le="5.0",model="gemma3-270m"} 0.0' in text
    assert 'llmgw_queue_wait_seconds_bucket{le="10.0",model="gemma3-270m"} 1.0' in text
    assert 'llmgw_queue_wait_seconds_sum{model="gemma3-270m"} 7.5' in text


def test_a_server_without_a_queue_shows_empty_queues() -> None:
    table = RoutingTable({"gemma3-270m": Serving(gemma_model(replicas=0), ())})
    assert 'llmgw_queue_depth{model="gemma3-270m"} 0.0' in Metrics(lambda: table).render().decode()


def test_a_scrape_sums_every_workers_counters_histograms_and_gauges() -> None:
    up = Upstream("r1", "http://127.0.0.1:39001/v1")
    table = RoutingTable({"gemma3-270m": Serving(gemma_model(replicas=0), ()),
                          "other": Serving(local_model("other"), (up,))})
    main = Metrics(lambda: table, queued=lambda: {"gemma3-270m": 1})
    worker = Metrics(lambda: table, queued=lambda: {"gemma3-270m": 2})
    main.request("other", 200, "sk-llmgw-ab", "chat_completions", 0.2, 0.0003, None, "")
    for _ in range(3):
        worker.request("other", 200, "sk-llmgw-ab", "chat_completions", 0.02, 0.0003, 0.01, "")
    worker.request("other", 502, "sk-llmgw-ab", "chat_completions", 0.02, 0.0003, None,
                   "upstream_error")
    worker.cold_start("gemma3-270m")
    up.outstanding = 2  # seen by both: each worker sends the other's in its state
    state = worker.state()
    up.outstanding = 1

    text = main.render([state]).decode()

    assert ('llmgw_requests_total{api="chat_completions",key="sk-llmgw-ab",model="other",'
            'status="200"} 4.0') in text
    assert 'llmgw_upstream_errors_total{code="upstream_error",model="other"} 1.0' in text
    assert 'llmgw_request_seconds_count{model="other"} 5.0' in text
    assert 'llmgw_request_seconds_bucket{le="0.025",model="other"} 4.0' in text
    assert 'llmgw_time_to_first_token_seconds_count{model="other"} 3.0' in text
    assert 'llmgw_cold_starts_total{model="gemma3-270m"} 1.0' in text
    assert 'llmgw_queue_depth{model="gemma3-270m"} 3.0' in text
    assert 'llmgw_requests_in_flight{model="other"} 3.0' in text
    assert 'llmgw_replicas_ready{model="other"} 1.0' in text  # the same table: not summed
    # The worker's own counters are untouched by the merge.
    assert sum(main.requests.values()) == 1


def test_a_workers_state_survives_the_trip_as_json() -> None:
    table = RoutingTable({})
    worker = Metrics(lambda: table)
    worker.request("m", 200, "k", "messages", 0.5, 0.001, None, "")
    state = orjson.loads(orjson.dumps(worker.state()))
    text = Metrics(lambda: table).render([state]).decode()
    assert 'llmgw_requests_total{api="messages",key="k",model="m",status="200"} 1.0' in text


def test_judge_queues_sheds_and_service_times_are_shown_per_judge() -> None:
    loads = {"demo-judge": JudgeLoad(slots=2, in_flight=2, queued=5, waited=40, shed=7, served=90)}
    metrics = Metrics(lambda: RoutingTable({}), judges=lambda: loads)
    metrics.judge_served("demo-judge", 0.6)
    metrics.judge_served("demo-judge", 1.2)
    metrics.judge_prompt("demo-judge", 20, 380)
    text = metrics.render().decode()

    assert 'llmgw_guard_queue_depth{judge="demo-judge"} 5.0' in text
    assert 'llmgw_guard_shed_total{judge="demo-judge"} 7.0' in text
    assert 'llmgw_guard_judgments_in_flight{judge="demo-judge"} 2.0' in text
    assert 'llmgw_guard_judge_slots{judge="demo-judge"} 2.0' in text
    assert 'llmgw_guard_judge_service_seconds_bucket{judge="demo-judge",le="0.75"} 1.0' in text
    assert 'llmgw_guard_judge_service_seconds_count{judge="demo-judge"} 2.0' in text
    assert 'llmgw_guard_judge_prompt_tokens_total{judge="demo-judge",source="cached"} 380.0' in text


def test_a_scrape_sums_every_workers_judge_queues_but_not_the_replicas_slots() -> None:
    table = RoutingTable({})
    main = Metrics(lambda: table, judges=lambda: {"demo-judge": JudgeLoad(slots=2, queued=1, shed=3)})
    worker = Metrics(lambda: table, judges=lambda: {"demo-judge": JudgeLoad(slots=2, queued=4, shed=1)})
    worker.judge_served("demo-judge", 0.6)
    worker.judge_prompt("demo-judge", 20, 380)

    text = main.render([orjson.loads(orjson.dumps(worker.state()))]).decode()

    assert 'llmgw_guard_queue_depth{judge="demo-judge"} 5.0' in text
    assert 'llmgw_guard_shed_total{judge="demo-judge"} 4.0' in text
    assert 'llmgw_guard_judge_slots{judge="demo-judge"} 2.0' in text
    assert 'llmgw_guard_judge_service_seconds_count{judge="demo-judge"} 1.0' in text
    assert 'llmgw_guard_judge_prompt_tokens_total{judge="demo-judge",source="cached"} 380.0' in text


def test_a_merged_scrape_keeps_the_other_collectors_of_the_process() -> None:
    class Cooling(Collector):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            yield GaugeMetricFamily("llmgw_route_target_cooling_down", "", value=1)

    table = RoutingTable({})
    main = Metrics(lambda: table)
    main.add_collector(Cooling())

    alone = main.render().decode()
    with_workers = main.render([Metrics(lambda: table).state()]).decode()

    assert "llmgw_route_target_cooling_down 1.0" in alone
    assert "llmgw_route_target_cooling_down 1.0" in with_workers
