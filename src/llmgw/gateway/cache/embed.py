"""Embedding a request's last user turn for the semantic cache, with a catalog model llmgw
serves (`[cache] embedding_model`), through the request path's own transport."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson

from llmgw.core.errors import LlmgwError
from llmgw.gateway.cache.semantic import Vector, unit
from llmgw.gateway.reach import connect
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import RoutingTable
from llmgw.gateway.wire.dialect import Api
from llmgw.gateway.wire.translate import PATHS

logger = logging.getLogger(__name__)

# A look-up waits this long for its embedding, then goes on as a miss: the cache must never
# cost a request more than it could save.
EMBED_TIMEOUT_S = 5.0


class Embedder:
    """Embeds texts with the install's embedding model, as the routing table serves it now."""

    def __init__(self, transport: Transport, table: Callable[[], RoutingTable], model: str) -> None:
        self._transport = transport
        self._table = table
        self.model = model
        self._warned = False

    async def __call__(self, text: str) -> Vector | None:
        """The unit vector of `text`; None when the model is not there or fails (said once in
        the log until it answers again)."""
        route = self._table().routes.get(self.model)
        if route is None or not route.upstreams:
            self._failed(f"the embedding model {self.model!r} has no ready replica")
            return None
        body = orjson.dumps({"model": route.upstream_model or self.model, "input": text})
        try:
            async with asyncio.timeout(EMBED_TIMEOUT_S):
                conn = await connect(self._transport, route, PATHS[Api.EMBEDDINGS], body)
                try:
                    if not 200 <= conn.status < 300:
                        raise await conn.failure()
                    raw = await conn.whole()
                finally:
                    conn.release()
        except TimeoutError:
            self._failed(f"the embedding model {self.model!r} took over {EMBED_TIMEOUT_S:g}s")
            return None
        except LlmgwError as exc:
            self._failed(f"the embedding model {self.model!r} failed: {exc.message}")
            return None
        try:
            values = orjson.loads(raw)["data"][0]["embedding"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            self._failed(f"the embedding model {self.model!r} answered no embedding")
            return None
        vector = unit(values) if isinstance(values, list) else None
        if vector is None:
            self._failed(f"the embedding model {self.model!r} answered no usable vector")
            return None
        self._warned = False
        return vector

    def _failed(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("semantic cache: %s; requests are looked up exactly meanwhile", why)
