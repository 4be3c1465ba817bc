"""The three signals an inference gateway picks a server by, per replica, in `/metrics`."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest

from llmgw.gateway.replica_signals import ReplicaSignals, kv_from_slots, parse_metrics
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from tests.factories import gemma_model, remote_model

# What llama-server (`--metrics`) answered on `/metrics` and `/slots` with one request running.
METRICS = b"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1709
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
"""
SLOTS = json.dumps([
    {"id": 0, "n_ctx": 4096, "is_processing": False},
    {"id": 1, "n_ctx": 4096, "is_processing": True, "n_prompt_tokens": 1709,
     "next_token": [{"n_decoded": 339}]},
]).encode()


def test_the_engines_gauges_are_read_from_its_metrics() -> None:
    assert parse_metrics(METRICS) == {"requests_processing": 1.0, "requests_deferred": 3.0}


def test_kv_cache_use_is_what_the_running_slots_hold_of_the_context() -> None:
    assert kv_from_slots(SLOTS) == 2048 / 8192
    assert kv_from_slots(b"not json") == 0.0
    assert kv_from_slots(b'{"error": "slots endpoint is disabled"}') == 0.0


async def test_each_ready_local_replica_is_exported_and_one_that_fails_is_left_out() -> None:
    a, b, dead = (Upstream(i, f"http://10.0.0.{n}:8000/v1") for n, i in enumerate(
        ("rep-a", "rep-b", "rep-dead")))
    table = RoutingTable({"gemma3-270m": Serving(gemma_model(), (a, b, dead)),
                          "gpt-4o-mini": Serving(remote_model(), (Upstream("remote", "https://x/v1"),))})
    asked: list[tuple[str, str]] = []

    async def fetch(up: Upstream, path: str) -> bytes:
        asked.append((up.id, path))
        if up is dead:
            raise ConnectionRefusedError
        if path == "/metrics":
            return METRICS if up is a else METRICS + b"llamacpp:kv_cache_usage_ratio 0.5\n"
        return SLOTS

    signals = ReplicaSignals(lambda: table, fetch)
    await signals.poll()
    registry = CollectorRegistry()
    registry.register(signals)
    text = generate_latest(registry).decode()

    assert 'llmgw_replica_queued_requests{model="gemma3-270m",replica="rep-a"} 3.0' in text
    assert 'llmgw_replica_running_requests{model="gemma3-270m",replica="rep-b"} 1.0' in text
    assert 'llmgw_replica_kv_cache_usage_ratio{model="gemma3-270m",replica="rep-a"} 0.25' in text
    # An engine that reports its KV use itself is taken at its word, without /slots.
    assert 'llmgw_replica_kv_cache_usage_ratio{model="gemma3-270m",replica="rep-b"} 0.5' in text
    assert ("rep-b", "/slots") not in asked
    assert "rep-dead" not in text and "remote" not in text  # no figures rather than stale ones
    assert all(rid != "remote" for rid, _ in asked)  # a provider is never polled
