"""Requests per second and errors from this server's own counters, for the overview."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from llmgw.gateway.metrics import Metrics

# Rates are over the samples of this window (every viewer's poll adds one).
WINDOW_S = 30.0


@dataclass(frozen=True)
class TrafficView:
    requests: int
    errors: int  # answered with a 5xx
    requests_per_s: float
    errors_per_s: float


class Traffic:
    """Samples of the request counters; rates are the change since the oldest sample in WINDOW_S."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._samples: deque[tuple[float, int, int]] = deque()

    def sample(self, metrics: Metrics) -> TrafficView:
        """Count now, and the rates since the oldest sample still in the window."""
        now = self._now()
        requests = errors = 0
        for labels, n in list(metrics.requests.items()):
            requests += n
            if labels[1].isdigit() and int(labels[1]) >= 500:
                errors += n
        while self._samples and now - self._samples[0][0] > WINDOW_S:
            self._samples.popleft()
        self._samples.append((now, requests, errors))
        then, r0, e0 = self._samples[0]
        span = now - then
        if span <= 0:
            return TrafficView(requests, errors, 0.0, 0.0)
        return TrafficView(requests, errors, (requests - r0) / span, (errors - e0) / span)
