"""The one way out: from a call to the connection whose answer its client gets.

A model is a route with one target. `reach` walks the call's targets (a model's one, or the
targets its route's plan ranked), and is the one place that decides, from a classified upstream
failure, whether to try the same target again, the next target, or give up; `connect` is one
attempt on one target: the replica `choice` picks, once more on another when the connection is
refused. The transport only sends. A model's call first passes its gate (`UpstreamCall.gate`):
its turn on the model's busy slots, waited for here rather than in a stage so that the guard,
which takes the way out itself, has judged the input first.

Everything here happens before an answer's first byte goes to the client: `reach` returns a
connection whose status is 2xx, and from then on the answer (whole or streamed) is the client's,
whatever happens to it. A failure of a kind the route's `fallback.on` covers counts towards the
target's cooldown and moves on to the next target; any other (a 400 that is the client's fault)
is answered at once, as for a plain model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import UTC, datetime

from llmgw.core import tracing
from llmgw.core.errors import (
    LlmgwError,
    NoReadyReplica,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from llmgw.core.routes import FailOn, Retry
from llmgw.gateway.call import Exchange, Outbound, UpstreamCall
from llmgw.gateway.outbound import outbound
from llmgw.gateway.transport import Connection, Transport
from llmgw.gateway.upstream.choice import choose
from llmgw.gateway.upstream.prefix import Affinity
from llmgw.gateway.upstream.router import Plan
from llmgw.gateway.upstream.table import Serving
from llmgw.gateway.upstream_errors import retry_after, upstream_failure

logger = logging.getLogger(__name__)

# How providers and llama.cpp say a prompt does not fit the model's context. Read from the error
# body llmgw holds anyway; the body itself never reaches the client.
_CONTEXT_MARKERS = (b"context_length_exceeded", b"exceed_context_size", b"maximum context length",
                    b"prompt is too long", b"context window")
# What llmgw answers as 502 although the status is not 5xx: the target, not the client, is wrong.
_BROKEN = frozenset({401, 403, 407})
# How long an upstream that could not be reached goes last in line: long enough to cover the
# routing table's next refresh, which drops a replica whose node is gone.
DOWN_FOR_S = 5.0


async def connect(transport: Transport, route: Serving, path: str, body: bytes,
                  found: Affinity | None = None) -> Connection:
    """POST `body` to `path` of the upstream of `route` `choice` chooses (for `found`, the
    request's affinity, where it has one) and wait for the answer's headers, whatever its
    status; a refused connection is tried once more on another upstream (nothing was sent: it
    cannot run the request twice)."""
    tried: frozenset[str] = frozenset()
    while True:
        up, why = choose(route, tried, found)
        if why:
            span = tracing.current()
            if span.recording:
                span.event("llmgw.choice", {"llmgw.upstream": up.id, "llmgw.reason": why})
        try:
            return await transport.send(up, path, body, len(tried))
        except UpstreamUnreachable as exc:
            up.down_until = time.monotonic() + DOWN_FOR_S
            logger.warning("upstream %s could not be reached: %s", up.id, exc.__cause__)
            tried = tried | {up.id}
            if len(tried) >= 2 or len(tried) >= len(route.upstreams):
                raise UpstreamUnreachable(
                    f"model '{route.model.name}': could not connect to an upstream"
                ) from exc.__cause__


def classify(status: int, body: bytes) -> FailOn | None:
    """The kind of an upstream's non-2xx answer, or None when it is the client's own fault (a
    400 other than the prompt being too long): no other target would answer it differently."""
    if status == 429:
        return FailOn.RATE_LIMITED
    if status >= 500 or status < 400 or status in _BROKEN:
        return FailOn.SERVER_ERROR
    if status in (400, 413, 422) and any(m in body for m in _CONTEXT_MARKERS):
        return FailOn.CONTEXT_LENGTH
    return None


def backoff_s(rule: Retry, retry: int, retry_after_s: float | None) -> float:
    """The wait before retry number `retry` (0 first): doubling from the rule's backoff up to
    its cap, or the upstream's Retry-After when that is longer."""
    wait: float = min(rule.backoff_ms * 2**retry, rule.max_backoff_ms) / 1000
    return max(wait, retry_after_s or 0.0)


class Failed(Exception):
    """One target failed in a way the route may move on from."""

    def __init__(self, kind: FailOn, error: LlmgwError) -> None:
        super().__init__(kind.value)
        self.kind = kind
        self.error = error


async def reach(transport: Transport, call: UpstreamCall, out: Outbound,
                exchange: Exchange) -> tuple[Connection, UpstreamCall, Outbound]:
    """The connection whose answer goes to `call`'s client, and the call and request as they
    went to the target that gave it. On a route: a 2xx answer, from the first target that gave
    one. A model is a route of one target without fallback rules: its answer, whatever the
    status (the caller turns a failure into the client's error)."""
    plan = call.plan
    if plan is None:
        if call.gate is not None and (waiting := call.gate(call)) is not None:
            await waiting  # its turn on the model's busy slots: after any input judgment
        return await connect(transport, call.route, out.path, out.body, call.affinity), call, out
    spec, router = plan.spec, plan.router
    if plan.left_out:
        span = tracing.current()
        if span.recording:
            for name, why in plan.left_out.items():
                span.event("llmgw.skipped", {"llmgw.route": spec.name, "llmgw.target": name,
                                             "llmgw.reason": why.value})
    deadline = call.started + transport.timeout_s
    last: LlmgwError | None = None
    routes = (call.route, *plan.targets[1:])
    for i, route in enumerate(routes):
        name = route.model.name
        if i:
            call = replace(call, route=route)
            try:
                out = outbound(call)
            except LlmgwError as exc:  # this target cannot take the request (its dialect)
                last = exc
                continue
        try:
            conn = await _attempt(transport, call, out, plan, deadline)
        except Failed as failed:
            last = failed.error
            if failed.kind not in spec.fallback.on:
                raise failed.error from None
            if failed.kind != FailOn.CONTEXT_LENGTH:  # a long prompt says nothing of its health
                router.failed(spec, name, failed.kind)
            if i + 1 < len(routes):
                nxt = routes[i + 1].model.name
                logger.warning("route %s: %s failed (%s); trying %s", spec.name, name,
                               failed.kind.value, nxt)
                router.fell_back(spec, name, nxt, failed.kind)
                span = tracing.current()
                if span.recording:
                    span.event("llmgw.fallback", {"llmgw.route": spec.name, "llmgw.from": name,
                                                  "llmgw.to": nxt, "llmgw.reason": failed.kind.value})
            continue
        router.succeeded(spec, name)
        exchange.target = name
        return conn, call, out
    raise last or NoReadyReplica(f"route '{spec.name}' has no target to try")


async def _attempt(transport: Transport, call: UpstreamCall, out: Outbound, plan: Plan,
                   deadline: float) -> Connection:
    """A 2xx answer from `call.route`'s model, retried on it per `rule`: connect errors, and 429
    or 503 from a remote provider (its Retry-After honoured); Failed when it cannot answer."""
    rule = plan.spec.retry
    target = call.route.model.name
    remote = call.route.model.is_remote
    retry = 0
    while True:
        wait: float | None = None
        error: LlmgwError
        try:
            conn = await connect(transport, call.route, out.path, out.body, call.affinity)
        except UpstreamUnreachable as exc:
            kind, error = FailOn.CONNECT, exc
            wait = backoff_s(rule, retry, None)
        except NoReadyReplica as exc:  # nothing to connect to: no retry makes one
            raise Failed(FailOn.CONNECT, exc) from None
        except UpstreamTimeout as exc:  # the whole timeout is spent: no time for another try
            raise Failed(FailOn.TIMEOUT, exc) from None
        except UpstreamError as exc:  # the connection failed while the request was sent
            raise Failed(FailOn.SERVER_ERROR, exc) from None
        else:
            if 200 <= conn.status < 300:
                return conn
            try:
                status, headers = conn.status, conn.headers
                body = await conn.error_body()
                error = upstream_failure(conn.name, status, headers, body)
            finally:
                conn.release()
            found = classify(status, body)
            if found is None:
                raise error
            kind = found
            if remote and status in (429, 503):
                header = headers.get("Retry-After")
                hint = retry_after(header, datetime.now(UTC)) if header else None
                wait = backoff_s(rule, retry, hint)
        if wait is None or retry >= rule.attempts or time.monotonic() + wait >= deadline:
            raise Failed(kind, error)
        plan.router.retried(plan.spec, target, kind)
        span = tracing.current()
        if span.recording:
            span.event("llmgw.retry", {"llmgw.route": plan.spec.name, "llmgw.target": target,
                                       "llmgw.reason": kind.value, "llmgw.retry": retry + 1})
        retry += 1
        await plan.router.sleep(wait)
