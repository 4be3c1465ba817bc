"""The request path as one service: authenticate, resolve, check access, forward.

It knows no web framework: `api/` hands it a request's parts and writes the `Reply` it returns."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

import orjson

from llmgw.core import tracing
from llmgw.core.cache import NONE_SAID, Directives
from llmgw.core.clock import Clock
from llmgw.core.errors import Forbidden, GuardBlocked, LlmgwError, ModelNotFound, UpstreamError
from llmgw.core.settings import PLAYGROUND_LIMITS
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.core.types import ApiKey, KeyScope, Limits, Model, Team
from llmgw.core.users import Person
from llmgw.gateway.auth import may_use, person_key, team_allows
from llmgw.gateway.cache.service import ResponseCache
from llmgw.gateway.call import Exchange, Reply, UpstreamCall
from llmgw.gateway.chain import Chain, Stage, compose
from llmgw.gateway.fair import FairShare
from llmgw.gateway.limits import Limiter
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.outbound import request
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.relay import send
from llmgw.gateway.snapshot import Refresher, Snapshot
from llmgw.gateway.stages import cache as cache_stage
from llmgw.gateway.stages import fair as fair_stage
from llmgw.gateway.stages import guard as guard_stage
from llmgw.gateway.stages import limits as limits_stage
from llmgw.gateway.stages import queue as queue_stage
from llmgw.gateway.traced import TracedTap, asked, ended
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.prefix import affinity
from llmgw.gateway.upstream.router import Plan, Router, resolve
from llmgw.gateway.upstream.table import RoutingTable
from llmgw.gateway.usage import Tokens, UsageMeter, UsageTap
from llmgw.gateway.wire import translate
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.dialect import Api, Wire
from llmgw.guard.enforcement import Guard

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
WIRES: dict[Api, Wire] = {api: spec.wire for api, spec in APIS.items()}

# The APIs whose prompts grow turn by turn on a shared start: where a replica's prompt cache pays.
_CONVERSING = frozenset({Api.CHAT, Api.COMPLETIONS, Api.RESPONSES, Api.MESSAGES})

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
        prefix_routing: bool = True,
        fair: FairShare | None = None,
    ) -> None:
        self._refresher = refresher
        # Routes' cooldowns and fallback counts, this server's.
        self.router = router or Router(clock)
        self.tracer = tracer  # the data plane's edge makes each request's span with it
        self.queue = queue
        # Busy local models' held requests, shared by tenant (None: none held).
        self.fair = fair
        self._transport = transport
        self._clock = clock
        self.guard = guard
        self.limiter = limiter
        self.meter = meter
        self.metrics = metrics
        self.cache = cache  # the response cache, when the install turned it on anywhere
        self._people_limits = people_limits  # what an admin or operator may send (`person_key`)
        # Whether a local model's requests go where their conversation went (`upstream.prefix`).
        self._prefix_routing = prefix_routing
        refresher.stage_with(self._chains)

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
                      said: Directives = NONE_SAID, session: str | None = None) -> Reply:
        """Send one request of `api` (its raw `body` and parsed `payload`) through the chain of
        stages its model or route runs, and return the answer (`said`: what the client said of
        the response cache; `session`: its `X-Llmgw-Session` header). A streamed reply settles
        usage when it is closed."""
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
        span = tracing.current()
        # A provider without a counting endpoint gets no call: llmgw estimates. Otherwise the
        # upstream request is built (translated) before admission, so a request the translation
        # refuses never holds a reservation.
        estimated = api == Api.COUNT_TOKENS \
            and Api.COUNT_TOKENS not in translate.SPEAKS[translate.speaks(route.model)]
        tap: UsageTap
        if estimated:
            out, tap = None, TracedTap() if span.recording else UsageTap()
        else:
            out = request(route, api, body, payload, ask.model, wire)
            tap = (TracedTap if span.recording else UsageTap)(out.wire.usage, out.wire.answer_text)
        exchange = Exchange(tap)
        call = UpstreamCall(route, body, payload, api, wire, ask, request_id, key,
                            started if started is not None else sent, plan, out, said, exchange)
        # Computed only where it may choose: a model of llmgw's engines not on one replica alone
        # (none yet: the queue may hand it several), or a route, whose targets may be such.
        if self._prefix_routing and api in _CONVERSING and out is not None and (
                plan is not None or (not route.model.is_remote and len(route.upstreams) != 1)):
            call.affinity = affinity(payload, session)
        if span.recording:
            asked(span, call)
        chain = snap.chains.get(ask.model) or self._chain(snap, ask.model)

        def account(status: int, code: str = "", blocked: bool = False) -> None:
            self._account(call, exchange, sent, status, code, blocked)
            if span.recording:
                ended(span, exchange, self._tokens(call, exchange), status, code)

        try:
            reply = await (chain.run if out is not None else chain.counted)(call)
        except BaseException as exc:
            if not exchange.refused:  # turned away at admission: not counted as a request
                if isinstance(exc, LlmgwError):
                    account(exc.status, exc.code or "", isinstance(exc, GuardBlocked))
                elif isinstance(exc, asyncio.CancelledError):  # the client left
                    account(CLIENT_CLOSED)
                else:
                    account(500)
            raise
        if out is None:
            account(200)  # counted as a native count is: a request, no tokens
            return reply
        if reply.stream is None or exchange.charged is not None:
            # Settled on the loop's next turn: the caller writes the answer in this one, so the
            # usage, the limits' counts and the metrics are off the client's wait. Never lost:
            # the loop runs it whether or not the client stays. (A cached answer is all here,
            # streamed or not: it is settled as a whole one.)
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

    def _account(self, call: UpstreamCall, exchange: Exchange, sent: float, status: int,
                 code: str, blocked: bool) -> None:
        """End the call: settle what its stages opened and count the request, as it ended (also
        when the client went away mid-stream: what was used is settled and counted)."""
        tokens = self._tokens(call, exchange)
        exchange.end(status, tokens)
        # On a route, counted against the model that answered (the route's name if none did).
        model, key = exchange.target or call.ask.model, call.key
        if self.meter is not None:
            self.meter.record(key.id, model, tokens,
                              error=status >= 400 and status != CLIENT_CLOSED and not blocked,
                              blocked=blocked, saved=exchange.saved)
        if self.metrics is not None:
            tap = exchange.tap
            ttft = tap.first_chunk_at - call.started if tap.first_chunk_at is not None else None
            self.metrics.request(model, status, key.prefix, call.api.value, time.monotonic() - call.started,
                                 max(sent - call.started, 0.0), ttft, code)

    @staticmethod
    def _tokens(call: UpstreamCall, exchange: Exchange) -> Tokens:
        """What the request is counted as having used: what its answer said (or an estimate);
        for an answer no upstream gave (the cache's), what its stage charges."""
        if exchange.charged is not None:
            return exchange.charged
        if call.api == Api.COUNT_TOKENS:
            return Tokens()
        return exchange.tap.result(prompt_estimate=math.ceil(len(call.body) / 4))

    def _chains(self, snap: Snapshot) -> dict[str, Chain]:
        """The chain of every name the snapshot serves (`Refresher.stage_with`)."""
        names = [*snap.table.routes, *(n for n in snap.route_specs if n not in snap.table.routes)]
        return {name: self._chain(snap, name) for name in names}

    def _chain(self, snap: Snapshot, name: str) -> Chain:
        """The stages `name` runs, only those that apply to it: limits where the install
        counts them; the cache where it or the install turns it on; the queue for a model that
        may start on demand; fair shares for a model on llmgw's own engines; the guard unless it
        is a judge. Then the upstream."""
        model = None if (served := snap.table.routes.get(name)) is None else served.model
        spec = snap.route_specs.get(name) if model is None else None
        admission: list[tuple[str, Stage]] = []
        stages: list[tuple[str, Stage]] = []
        if self.limiter is not None:
            admission.append(("limits", limits_stage.stage(self.limiter)))
        cache = self.cache
        own = model.cache if model is not None else spec.cache if spec is not None else None
        if cache is not None and (cache.on or own is not None):
            stages.append(("cache", cache_stage.stage(cache, own, snap.cache_epochs, self.guard,
                                                      self.metrics)))
        if self.queue is not None and (model is None or not (model.is_remote or model.scaling.max == 0)):
            stages.append(("queue", queue_stage.stage(self.queue, self._table, self.metrics)))
        if self.fair is not None and model is not None and not model.is_remote:
            # Before the guard, which takes the way out itself where a policy covers the call:
            # the stage only gives the call its gate, which the way out passes after judgment.
            stages.append(("fair", fair_stage.stage(self.fair, self._table, snap.keys.teams)))
        if self.guard is not None and (model is None or not model.guard):
            stages.append(("guard", guard_stage.stage(self.guard, self._transport)))
        every = admission + stages
        return Chain(tuple(n for n, _ in every) + ("upstream",),
                     compose([s for _, s in every], self._upstream),
                     compose([s for _, s in admission], _estimate))

    def _table(self) -> RoutingTable:
        return self._refresher.current.table

    def _upstream(self, call: UpstreamCall) -> Awaitable[Reply]:
        """The chain's last step: the call on its way out, unjudged."""
        out = call.out
        assert out is not None
        return send(self._transport, call, out, call.exchange)


async def _estimate(call: UpstreamCall) -> Reply:
    """The answer to a count of tokens no upstream can count: about one token per 4 bytes of
    the request, as for every estimate llmgw makes."""
    return Reply(body=orjson.dumps({"input_tokens": math.ceil(len(call.body) / 4)}))
