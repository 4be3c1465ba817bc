"""Requests per second from the gateway's counters, as plain data with a fake clock."""

from __future__ import annotations

from llmgw.api.console.traffic import WINDOW_S, Traffic
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.upstream.table import RoutingTable


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def requests(metrics: Metrics, n: int, status: int = 200) -> None:
    for _ in range(n):
        metrics.request("m", status, "sk-x", "chat_completions", 0.1, 0.001, None, "")


def test_the_rate_is_the_change_over_the_window() -> None:
    clock, metrics = Clock(), Metrics(lambda: RoutingTable({}))
    traffic = Traffic(clock)
    first = traffic.sample(metrics)
    assert (first.requests, first.requests_per_s) == (0, 0.0)
    requests(metrics, 20)
    requests(metrics, 4, status=502)
    clock.t += 2
    view = traffic.sample(metrics)
    assert view.requests == 24 and view.errors == 4
    assert view.requests_per_s == 12.0 and view.errors_per_s == 2.0


def test_old_samples_leave_the_window() -> None:
    clock, metrics = Clock(), Metrics(lambda: RoutingTable({}))
    traffic = Traffic(clock)
    traffic.sample(metrics)
    requests(metrics, 100)
    clock.t += WINDOW_S + 1
    traffic.sample(metrics)  # the burst is now history: the only sample left is this one
    clock.t += 1
    assert traffic.sample(metrics).requests_per_s == 0.0


def test_client_errors_are_not_counted_as_errors() -> None:
    clock, metrics = Clock(), Metrics(lambda: RoutingTable({}))
    requests(metrics, 3, status=429)
    assert Traffic(clock).sample(metrics).errors == 0
