"""The request path as one service: authenticate, resolve, check access, forward."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.core.clock import Clock
from llmgw.core.errors import Forbidden
from llmgw.core.guard import Direction
from llmgw.core.types import ApiKey, Model
from llmgw.gateway.auth import may_use
from llmgw.gateway.guarded import forward_guarded
from llmgw.gateway.proxy import UpstreamClient
from llmgw.gateway.snapshot import Refresher
from llmgw.guard.enforcement import Guard, RequestInfo


class Gateway:
    """Everything a data-plane route needs; reads only memory, never the store."""

    def __init__(
        self, refresher: Refresher, client: UpstreamClient, clock: Clock, guard: Guard | None = None
    ) -> None:
        self._refresher = refresher
        self._client = client
        self._clock = clock
        self.guard = guard

    def authenticate(self, authorization: str | None) -> ApiKey:
        return self._refresher.current.keys.authenticate(authorization, self._clock.now())

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
            raise Forbidden(f"this key may not use model '{name}'", param="model")
        stream = payload.get("stream") is True
        guard = self.guard
        if guard is not None and path != "/embeddings" and not route.model.guard:
            inputs = guard.policies(name, key.name, Direction.INPUT)
            outputs = guard.policies(name, key.name, Direction.OUTPUT)
            if inputs or outputs:
                info = RequestInfo(model=name, key_name=key.name, key_label=key.label)
                return await forward_guarded(guard, self._client, request, table, route, path,
                                             body, payload, info, inputs, outputs)
        return await self._client.forward(request, table, route, path, body, payload, stream)
