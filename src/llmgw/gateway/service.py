"""The request path as one service: authenticate, resolve, check access, forward.

It knows no web framework: `api/` hands it a request's parts and writes the `Reply` it returns."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Awaitable
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from llmgw.core import tracing
from llmgw.core.clock import Clock
from llmgw.core.errors import (
    Forbidden,
    GuardBlocked,
    LlmgwError,
    ModelNotFound,
    QueueFull,
    UpstreamError,
)
from llmgw.core.guard import Direction, Policy
from llmgw.core.settings import PLAYGROUND_LIMITS
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.core.types import ApiKey, KeyScope, Limits, Model, Team
from llmgw.core.users import Person
from llmgw.gateway.auth import may_use, person_key, team_allows
from llmgw.gateway.cache.capture import CapturingTap
from llmgw.gateway.cache.entry import CachedAnswer
from llmgw.gateway.cache.keys import NONE_SAID, Directives
from llmgw.gateway.cache.replay import replay
from llmgw.gateway.cache.service import HIT, MISS, Probe, ResponseCache, admits
from llmgw.gateway.call import Exchange, Reply, UpstreamCall
from llmgw.gateway.guarded import Judged, forward_guarded
from llmgw.gateway.limits import Limiter, Ticket, reserve_estimate
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.relay import Outbound, outbound, send
from llmgw.gateway.snapshot import Refresher
from llmgw.gateway.traced import TracedTap, asked, ended
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.router import Plan, Router, resolve
from llmgw.gateway.usage import Tokens, UsageMeter, UsageTap
from llmgw.gateway.wire import anthropic_messages, openai_chat, openai_responses, translate
from llmgw.gateway.wire.dialect import Api, Wire
from llmgw.guard.enforcement import Guard, RequestInfo

# Who reaches the data plane and the admin API (where admin routes then ask for admin keys). A
# node join token reaches the agent API only and a metrics key `/metrics` only: each is a
# credential kept on a machine or in a scraper's config, and grants the least it can.
CLIENT_SCOPES = frozenset({KeyScope.ADMIN, KeyScope.USER})
_ONLY = {
    KeyScope.NODE: "a node join token cannot mint keys or call models: it reaches the agent API only",
    KeyScope.METRICS: "a metrics key cannot mint keys or call models: it reaches /metrics only",
}


def _in_scopes(key: ApiKey, scopes: frozenset[KeyScope]) -> ApiKey:
    if key.scope not in scopes:
        wanted = " or ".join(sorted(scope.value for scope in scopes))
        raise Forbidden(_ONLY.get(key.scope) or f"this endpoint takes {wanted} keys only")
    return key


# Which dialect reads each API's requests.
WIRES: dict[Api, Wire] = {
    Api.CHAT: openai_chat.CHAT,
    Api.COMPLETIONS: openai_chat.COMPLETIONS,
    Api.EMBEDDINGS: openai_chat.EMBEDDINGS,
    Api.RERANK: openai_chat.RERANK,
    Api.RESPONSES: openai_responses.WIRE,
    Api.MESSAGES: anthropic_messages.WIRE,
    Api.COUNT_TOKENS: anthropic_messages.COUNT_TOKENS,
}

# The status metrics show for a request whose client went away (nginx's): not an upstream error.
CLIENT_CLOSED = 499


class Gateway:
    """Everything a data-plane route needs; reads only memory, never the store."""

    def __init__(
        self,
        refresher: Refresher,
        transport: Transport,
        clock: Clock,
        guard: Guard | None = None,
        limiter: Limiter | None = None,
        meter: UsageMeter | None = None,
        metrics: Metrics | None = None,
        *,
        queue: ColdQueue | None = None,
        router: Router | None = None,
        tracer: Tracer = NOOP_TRACER,
        cache: ResponseCache | None = None,
        people_limits: Limits = PLAYGROUND_LIMITS,
    ) -> None:
        self._refresher = refresher
        # Routes' cooldowns and fallback counts, this server's.
        self.router = router or Router(clock)
        self.tracer = tracer  # the data plane's edge makes each request's span with it
        self.queue = queue
        self._transport = transport
        self._clock = clock
        self.guard = guard
        self.limiter = limiter
        self.meter = meter
        self.metrics = metrics
        self.cache = cache  # the response cache, when the install turned it on anywhere
        self._people_limits = people_limits  # what an admin or operator may send (`person_key`)

    def authenticate(
        self, authorization: str | None, scopes: frozenset[KeyScope] = CLIENT_SCOPES
    ) -> ApiKey:
        """The caller's key, or 401; 403 when its scope is not one of `scopes`."""
        key = self._refresher.current.keys.authenticate(authorization, self._clock.now())
        return _in_scopes(key, scopes)

    def principal(self, key_id: str, scopes: frozenset[KeyScope] = CLIENT_SCOPES) -> ApiKey:
        """The key with this id, as `authenticate` would let it in now: 401 when it is unknown,
        revoked, expired or minted beneath a revoked or expired key; 403 outside `scopes`."""
        return _in_scopes(self._refresher.current.keys.principal(key_id, self._clock.now()), scopes)

    def sender(self, caller: ApiKey | Person) -> ApiKey:
        """The key `caller`'s requests go to the data plane as: a key is itself; a signed-in
        person goes as `person_key` says (Forbidden for a viewer)."""
        if isinstance(caller, ApiKey):
            return caller
        return person_key(self._refresher.current.keys, caller, self._people_limits)

    def team(self, team_id: str) -> Team | None:
        """The team `team_id` as the request path sees it now (None: it is gone)."""
        return self._refresher.current.keys.teams.get(team_id)

    def answering(self, name: str) -> bool:
        """Whether catalog model `name` takes a request now (`Serving.answering`)."""
        route = self._refresher.current.table.routes.get(name)
        return route is not None and route.answering(time.monotonic()) > 0

    def models(self, key: ApiKey) -> list[Model]:
        """Catalog models this key may use."""
        snap = self._refresher.current
        return [r.model for name, r in sorted(snap.table.routes.items())
                if may_use(key, name) and team_allows(snap.keys, key, name)]

    def listed(self, key: ApiKey) -> list[tuple[str, datetime | None]]:
        """The names `/v1/models` shows this key: its catalog models and routes, with when each
        was made (a route whose name a catalog model also has is that model)."""
        snap = self._refresher.current
        named = {m.name: m.created_at for m in self.models(key)}
        for name, spec in snap.route_specs.items():
            if name not in snap.table.routes and may_use(key, name) \
                    and team_allows(snap.keys, key, name):
                named[name] = spec.created_at
        return sorted(named.items())

    async def forward(self, key: ApiKey, api: Api, body: bytes, payload: dict[str, Any],
                      request_id: str = "", started: float | None = None,
                      said: Directives = NONE_SAID) -> Reply:
        """Send one request of `api` (its raw `body` and parsed `payload`) to an upstream of its
        model and return the answer, or the response cache's (`said`: what the client said of
        it). A streamed reply settles usage when it is closed."""
        wire = WIRES[api]
        ask = wire.read(payload)
        snap = self._refresher.current
        route = snap.table.routes.get(ask.model)
        plan: Plan | None = None
        if route is None:  # a route's name (a catalog model's own name wins)
            plan = self.router.plan(resolve(snap.route_specs, ask.model), snap.table)
            route = plan.targets[0]
        if not may_use(key, ask.model) or (key.team is not None and not team_allows(
                snap.keys, key, ask.model)):
            # The same answer as for a model that does not exist: a key cannot map the catalog.
            raise ModelNotFound(f"The model '{ask.model}' does not exist", param="model")
        sent = time.monotonic()
        call = UpstreamCall(route, body, payload, api, wire, ask, request_id, key,
                            started if started is not None else sent, plan)
        span = tracing.current()
        if span.recording:
            asked(span, call)
        free = api == Api.COUNT_TOKENS  # counting generates nothing: it costs a request, no tokens
        # A provider without a counting endpoint gets no call: llmgw estimates. Otherwise the
        # upstream request is built (translated) before admission, so a request the translation
        # refuses never holds a reservation.
        estimated = free and Api.COUNT_TOKENS not in translate.SPEAKS[translate.speaks(route.model)]
        out = None if estimated else outbound(call)
        limiter = self.limiter
        if limiter is None:
            ticket = None
        elif limiter.shared is None:
            ticket = limiter.admit(key, 0 if free else reserve_estimate(ask.max_tokens, len(body)))
        else:  # one round trip to the install's shared limit store
            ticket = await limiter.admit_shared(
                key, 0 if free else reserve_estimate(ask.max_tokens, len(body)))
        cache = self.cache
        probe = None if cache is None or out is None or not (cache.on or snap.caching) \
            else self._probe(cache, call, said, snap.cache_epochs)
        tap: UsageTap
        if out is None:
            tap = TracedTap() if span.recording else UsageTap()
        elif probe is not None and probe.store and cache is not None:
            # Its answer is read again to be kept: it keeps the bytes a plain tap only counts.
            tap = CapturingTap(out.wire.usage, out.wire.answer_text, out.wire.event_text,
                               cache.max_answer_bytes)
        else:
            tap = (TracedTap if span.recording else UsageTap)(out.wire.usage, out.wire.answer_text)
        exchange = Exchange(tap, probe=probe)

        def account(status: int, code: str = "", blocked: bool = False) -> None:
            self._account(call, exchange, ticket, sent, status, code, blocked)
            if span.recording:
                ended(span, exchange, self._tokens(call, exchange), status, code)

        if out is None:
            account(200)  # counted as a native count is: a request, no tokens
            # About one token per 4 bytes of the request, as for every estimate llmgw makes.
            return Reply(body=orjson.dumps({"input_tokens": math.ceil(len(body) / 4)}))
        try:
            if probe is not None and probe.lookup and cache is not None:
                exchange.hit, exchange.vector = await cache.lookup(probe)
                if exchange.hit is not None:
                    reply = await self._replayed(call, exchange.hit)
                    asyncio.get_running_loop().call_soon(account, reply.status)
                    return reply
            if not route.upstreams:
                # After admission, so a key over its limits is told at once, not after the wait.
                # `sent` stays: the wait is the model's cold start, not the gateway's overhead.
                call = await self._queued(call)
            reply = await self._send(call, out, exchange)
        except LlmgwError as exc:
            account(exc.status, exc.code or "", isinstance(exc, GuardBlocked))
            raise
        except asyncio.CancelledError:  # the client left: the upstream call was dropped with it
            account(CLIENT_CLOSED)
            raise
        except BaseException:
            account(500)
            raise
        if probe is not None and reply.headers is None:
            reply.headers = MISS
        if reply.stream is None:
            # Settled on the loop's next turn: the caller writes the answer in this one, so the
            # usage, the limits' counts and the metrics are off the client's wait. Never lost:
            # the loop runs it whether or not the client stays.
            asyncio.get_running_loop().call_soon(account, reply.status)
        else:
            broke = reply.stream.broke

            def closed(completed: bool) -> None:
                # A stream its upstream broke was sent to its end, the dialect's error event
                # last: it failed, as one whose upstream failed before its first byte.
                exchange.broke = completed and broke()
                if exchange.broke:
                    account(UpstreamError.status, UpstreamError.code or "")
                else:
                    account(200 if completed else CLIENT_CLOSED, blocked=exchange.blocked)

            reply.stream.on_close(closed)
        return reply

    def _account(self, call: UpstreamCall, exchange: Exchange, ticket: Ticket | None, sent: float,
                 status: int, code: str, blocked: bool) -> None:
        """Settle the reservation and count the request, as it ended (also when the client went
        away mid-stream: what was used is settled and counted)."""
        tokens = self._tokens(call, exchange)
        if ticket is not None:
            ticket.settle(tokens.total)
        # On a route, counted against the model that answered (the route's name if none did).
        model, key = exchange.target or call.ask.model, call.key
        probe, saved = exchange.probe, None
        if probe is not None:  # the response cache's share, only where it is on
            saved = self._cached(probe, exchange, tokens, status)
            if self.metrics is not None and status < 400:
                self.metrics.cache_lookup(call.ask.model, saved is not None, saved or 0)
        if self.meter is not None:
            self.meter.record(key.id, model, tokens,
                              error=status >= 400 and status != CLIENT_CLOSED and not blocked,
                              blocked=blocked, saved=saved)
        if self.metrics is not None:
            tap = exchange.tap
            ttft = tap.first_chunk_at - call.started if tap.first_chunk_at is not None else None
            self.metrics.request(model, status, key.prefix, call.api.value, time.monotonic() - call.started,
                                 max(sent - call.started, 0.0), ttft, code)

    def _tokens(self, call: UpstreamCall, exchange: Exchange) -> Tokens:
        """What the request is counted as having used: what its answer said (or an estimate);
        for an answer from the cache, nothing unless hits are charged."""
        hit = exchange.hit
        if hit is not None:
            charged = self.cache is not None and self.cache.settings.charge_hits
            return Tokens(hit.prompt_tokens, hit.completion_tokens) if charged else Tokens()
        if call.api == Api.COUNT_TOKENS:
            return Tokens()
        return exchange.tap.result(prompt_estimate=math.ceil(len(call.body) / 4))

    def _probe(self, cache: ResponseCache, call: UpstreamCall, said: Directives,
               epochs: dict[str, str]) -> Probe | None:
        """Where the cache keeps this request's answer, under the output policies that pass
        it as they stand (a changed policy makes every key it affects a new one)."""
        spec = call.route.model.cache if call.plan is None else call.plan.spec.cache
        cache.follow(epochs)

        def guard() -> str:
            outputs = self._policies(call)[1]
            return hashlib.sha256(b"".join(p.model_dump_json(exclude={"by", "created_at"}).encode()
                                           for p in outputs)).hexdigest()[:16] if outputs else ""

        return cache.probe(call.api, call.payload, call.key, call.ask.model, spec, said, guard,
                           lambda: [(t.role, t.content) for t in call.ask.turns])

    def _cached(self, probe: Probe, exchange: Exchange, tokens: Tokens,
                status: int) -> int | None:
        """The tokens a hit saved (None: no hit; a hit the input guard refused saved nothing);
        for a miss, keep its answer when the cache admits it (`admits`) and it can be told
        again whole."""
        hit = exchange.hit
        if hit is not None:
            return hit.prompt_tokens + hit.completion_tokens if status < 400 else None
        tap = exchange.tap
        if (self.cache is not None and isinstance(tap, CapturingTap)
                and admits(probe, exchange, status)):
            answer = tap.answer(tokens)
            if answer is not None:
                self.cache.keep(probe, answer, exchange.vector)
        return None

    async def _replayed(self, call: UpstreamCall, hit: CachedAnswer) -> Reply:
        """A kept answer, once the input guard passed the request that asks for it."""
        guard, inputs = self.guard, self._policies(call)[0]
        if guard is not None and inputs and call.ask.turns:
            key = call.key
            info = RequestInfo(model=call.route.model.name, key_name=key.name,
                               key_label=key.label, request_id=call.request_id)
            await guard.check(inputs, Direction.INPUT, call.ask.turns, info)
        options = call.payload.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        reply = replay(hit, call.api, call.ask.model, call.ask.stream, usage)
        reply.headers = HIT
        return reply

    def _policies(self, call: UpstreamCall) -> tuple[list[Policy], list[Policy]]:
        """The guard's input and output policies that cover the call (none for a judge)."""
        guard = self.guard
        if guard is None or call.route.model.guard:
            return [], []
        return _covering(guard, call)

    async def _queued(self, call: UpstreamCall) -> UpstreamCall:
        """`call` on a route with a ready replica, once the queue has one for its local model;
        as it is otherwise (the transport then answers 503 with the reason at once)."""
        queue, model = self.queue, call.route.model
        # A model that fits on no node, or may have no replica at all, is not coming: no wait.
        if queue is None or model.is_remote or model.scaling.max == 0 or call.route.nowhere:
            return call
        name = model.name
        entered = time.monotonic()
        try:
            route = await queue.wait(call.route, lambda: self._refresher.current.table.resolve(name))
        except QueueFull:
            raise  # turned away: it never waited
        except BaseException:
            self._waited(name, entered)
            raise
        self._waited(name, entered)
        return replace(call, route=route)

    def _waited(self, model: str, entered: float) -> None:
        if self.metrics is not None:
            self.metrics.queue_wait(model, time.monotonic() - entered)

    def _send(self, call: UpstreamCall, out: Outbound, exchange: Exchange) -> Awaitable[Reply]:
        """The call on its way: judged where a policy covers it, else as it is. (Returns the
        coroutine rather than awaiting it: one frame less on every request's way.)"""
        guard = self.guard
        name = call.route.model.name
        if guard is not None and not call.route.model.guard:
            key = call.key
            inputs, outputs = _covering(guard, call)
            if (inputs or outputs) and call.ask.turns:
                info = RequestInfo(model=name, key_name=key.name, key_label=key.label,
                                   request_id=call.request_id)
                return forward_guarded(self._transport, call, out, exchange,
                                       Judged(guard, info, inputs, outputs))
        return send(self._transport, call, out, exchange)


def _covering(guard: Guard, call: UpstreamCall) -> tuple[list[Policy], list[Policy]]:
    """The input and output policies covering the call: its model's, or on a route (whichever
    target answers) what covers the route or any of its targets."""
    if call.plan is None:
        name, key = call.route.model.name, call.key.name
        return guard.policies(name, key, Direction.INPUT), guard.policies(name, key, Direction.OUTPUT)
    return _route_policies(guard, call.plan, call.key.name)


def _route_policies(guard: Guard, plan: Plan, key_name: str) -> tuple[list[Policy], list[Policy]]:
    """The input and output policies covering a route's name or any of its targets, once each."""
    names = [plan.spec.name, *(t.model.name for t in plan.targets)]
    found: list[list[Policy]] = []
    for direction in (Direction.INPUT, Direction.OUTPUT):
        seen: dict[str, Policy] = {}
        for n in names:
            for p in guard.policies(n, key_name, direction):
                seen.setdefault(p.name, p)
        found.append(list(seen.values()))
    return found[0], found[1]
