"""What `/metrics` shows of on-demand models: queues, waits, cold starts and evictions."""

from __future__ import annotations

from llmgw.core.guard import JudgeLoad
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.routing import Route, RoutingTable, Upstream
from tests.factories import gemma_model, local_model, remote_model


def test_queues_waits_cold_starts_and_evictions_are_shown_per_model() -> None:
    table = RoutingTable({
        "gemma3-270m": Route(gemma_model(replicas=0), ()),
        "other": Route(local_model("other"), (Upstream("r1", "http://127.0.0.1:39001/v1"),)),
        "gpt-4o-mini": Route(remote_model(), ()),
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
    table = RoutingTable({"gemma3-270m": Route(gemma_model(replicas=0), ())})
    assert 'llmgw_queue_depth{model="gemma3-270m"} 0.0' in Metrics(lambda: table).render().decode()


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
