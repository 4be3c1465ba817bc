"""The queue stage: a call to a local model with no ready replica waits for one (`ColdQueue`),
after admission, so a key over its limits is told at once, not after the wait."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from llmgw.core.errors import QueueFull
from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.chain import Next, Stage
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.upstream.table import RoutingTable


def stage(queue: ColdQueue, table: Callable[[], RoutingTable], metrics: Metrics | None) -> Stage:
    """The queue stage: `table()` is the routing table now, where a woken call finds its
    model's replica."""

    def queued(call: UpstreamCall, nxt: Next) -> Awaitable[Reply]:
        route = call.route
        model = route.model
        # A model that fits on no node, or may have no replica at all, is not coming: no wait
        # (the way out then answers 503 with the reason at once).
        if route.upstreams or model.is_remote or model.scaling.max == 0 or route.nowhere:
            return nxt(call)
        return _wait(queue, table, metrics, call, nxt)

    return queued


async def _wait(queue: ColdQueue, table: Callable[[], RoutingTable], metrics: Metrics | None,
                call: UpstreamCall, nxt: Next) -> Reply:
    # The call's `sent` time stays: the wait is the model's cold start, not the gateway's overhead.
    name = call.route.model.name
    entered = time.monotonic()
    try:
        route = await queue.wait(call.route, lambda: table().resolve(name))
    except QueueFull:
        raise  # turned away: it never waited
    except BaseException:
        _waited(metrics, name, entered)
        raise
    _waited(metrics, name, entered)
    return await nxt(replace(call, route=route))


def _waited(metrics: Metrics | None, model: str, entered: float) -> None:
    if metrics is not None:
        metrics.queue_wait(model, time.monotonic() - entered)
