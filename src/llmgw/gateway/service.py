"""The request path as one service: authenticate, resolve, check access, forward."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from aiohttp import web

from llmgw.core.clock import Clock
from llmgw.core.errors import Forbidden, GuardBlocked, LlmgwError, ModelNotFound
from llmgw.core.guard import Direction
from llmgw.core.types import ApiKey, KeyScope, Model
from llmgw.gateway.auth import may_use
from llmgw.gateway.context import REQUEST_ID, STARTED
from llmgw.gateway.guarded import forward_guarded
from llmgw.gateway.limits import Limiter, reserve_estimate
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.proxy import UpstreamClient
from llmgw.gateway.routing import Route, RoutingTable
from llmgw.gateway.snapshot import Refresher
from llmgw.gateway.usage import UsageMeter, UsageTap
from llmgw.guard.enforcement import Guard, RequestInfo

# Who reaches the data plane and the admin API (where admin routes then ask for admin keys). A
# node join token reaches the agent API only and a metrics key `/metrics` only: each is a
# credential kept on a machine or in a scraper's config, and grants the least it can.
CLIENT_SCOPES = frozenset({KeyScope.ADMIN, KeyScope.USER})
_ONLY = {
    KeyScope.NODE: "a node join token cannot mint keys or call models: it reaches the agent API only",
    KeyScope.METRICS: "a metrics key cannot mint keys or call models: it reaches /metrics only",
}

# The status metrics show for a request whose client went away (nginx's): not an upstream error.
CLIENT_CLOSED = 499


class Gateway:
    """Everything a data-plane route needs; reads only memory, never the store."""

    def __init__(
        self,
        refresher: Refresher,
        client: UpstreamClient,
        clock: Clock,
        guard: Guard | None = None,
        limiter: Limiter | None = None,
        meter: UsageMeter | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._refresher = refresher
        self._client = client
        self._clock = clock
        self.guard = guard
        self.limiter = limiter
        self.meter = meter
        self.metrics = metrics

    def authenticate(
        self, authorization: str | None, scopes: frozenset[KeyScope] = CLIENT_SCOPES
    ) -> ApiKey:
        """The caller's key, or 401; 403 when its scope is not one of `scopes`."""
        key = self._refresher.current.keys.authenticate(authorization, self._clock.now())
        if key.scope not in scopes:
            wanted = " or ".join(sorted(scope.value for scope in scopes))
            raise Forbidden(_ONLY.get(key.scope) or f"this endpoint takes {wanted} keys only")
        return key

    def models(self, key: ApiKey) -> list[Model]:
        """Catalog models this key may use."""
        routes = self._refresher.current.table.routes
        return [r.model for name, r in sorted(routes.items()) if may_use(key, name)]

    async def forward(
        self,
        request: web.Request,
        key: ApiKey,
        path: str,
        body: bytes,
        payload: dict[str, Any],
    ) -> web.StreamResponse:
        """Send one OpenAI request for `payload["model"]` to an upstream and relay the answer."""
        table = self._refresher.current.table
        name = payload["model"]
        route = table.resolve(name)
        if not may_use(key, name):
            # The same answer as for a model that does not exist: a key cannot map the catalog.
            raise ModelNotFound(f"The model '{name}' does not exist", param="model")
        ticket = self.limiter.admit(key, reserve_estimate(payload, len(body))) if self.limiter else None
        tap = UsageTap()
        status, blocked, code = 500, False, ""
        sent = time.monotonic()
        try:
            response = await self._send(request, key, table, route, path, body, payload, tap)
            status = response.status
            return response
        except LlmgwError as exc:
            status, blocked, code = exc.status, isinstance(exc, GuardBlocked), exc.code or ""
            raise
        except asyncio.CancelledError:  # the client left: the upstream call was dropped with it
            status = CLIENT_CLOSED
            raise
        finally:
            # Also when the client went away mid-stream: what was used is settled and counted.
            tokens = tap.result(prompt_estimate=math.ceil(len(body) / 4))
            if ticket is not None:
                ticket.settle(tokens.total)
            if self.meter is not None:
                self.meter.record(key.id, name, tokens,
                                  error=status >= 400 and status != CLIENT_CLOSED and not blocked,
                                  blocked=blocked)
            if self.metrics is not None:
                self._observe(request, key, name, status, code, sent, tap)

    def _observe(self, request: web.Request, key: ApiKey, model: str, status: int, code: str,
                 sent: float, tap: UsageTap) -> None:
        assert self.metrics is not None
        start = request.get(STARTED, sent)
        ttft = tap.first_chunk_at - start if tap.first_chunk_at is not None else None
        self.metrics.request(model, status, key.prefix, time.monotonic() - start,
                             max(sent - start, 0.0), ttft, code)

    async def _send(
        self,
        request: web.Request,
        key: ApiKey,
        table: RoutingTable,
        route: Route,
        path: str,
        body: bytes,
        payload: dict[str, Any],
        tap: UsageTap,
    ) -> web.StreamResponse:
        name = route.model.name
        stream = payload.get("stream") is True
        guard = self.guard
        if guard is not None and path != "/embeddings" and not route.model.guard:
            inputs = guard.policies(name, key.name, Direction.INPUT)
            outputs = guard.policies(name, key.name, Direction.OUTPUT)
            if inputs or outputs:
                info = RequestInfo(model=name, key_name=key.name, key_label=key.label,
                                   request_id=request.get(REQUEST_ID, ""))
                return await forward_guarded(guard, self._client, request, table, route, path,
                                             body, payload, info, inputs, outputs, tap)
        return await self._client.forward(request, table, route, path, body, payload, stream, tap)
