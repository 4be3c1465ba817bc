"""The three signals Kubernetes' inference gateways read, per llama.cpp replica, in `/metrics`.

The Gateway API Inference Extension's endpoint picker (and llm-d's, AIBrix's) chooses among a
model's servers by their queued requests, running requests and KV-cache use. llmgw reads them
from each ready replica of its own engines every few seconds: llama-server's `/metrics`
(`--metrics`: `llamacpp:requests_deferred`, `llamacpp:requests_processing`, and
`llamacpp:kv_cache_usage_ratio` where the build still exports it) and its `/slots` (the tokens
held by the slots that are processing, over the slots' context, where it does not). A replica
that does not answer in time keeps no figures: a stale one would mislead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiohttp
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmgw.gateway.metrics import REPLICA_KV_CACHE, REPLICA_QUEUED, REPLICA_RUNNING
from llmgw.gateway.upstream.table import RoutingTable, Upstream

logger = logging.getLogger(__name__)

# Fetches a path of a replica's engine (its root, not `/v1`): the body, or raises.
Fetch = Callable[[Upstream, str], Awaitable[bytes]]

_LINE = re.compile(rb"^llamacpp:(requests_deferred|requests_processing|kv_cache_usage_ratio)"
                   rb"(?:\{[^}]*\})? ([0-9.eE+-]+)\s*$", re.M)


@dataclass(frozen=True, slots=True)
class Signals:
    """One replica's load as its engine reports it."""

    queued: float
    running: float
    kv_cache: float  # 0..1


def parse_metrics(text: bytes) -> dict[str, float]:
    """The llama.cpp gauges this module reads, by their name without `llamacpp:`."""
    return {name.decode(): float(value) for name, value in _LINE.findall(text)}


def kv_from_slots(body: bytes) -> float:
    """The share of the slots' context that the slots processing a request hold (prompt and
    tokens decoded so far), from llama-server's `/slots`; 0 when it says nothing usable."""
    try:
        slots = json.loads(body)
    except ValueError:
        return 0.0
    if not isinstance(slots, list):
        return 0.0
    held = total = 0
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        n_ctx = slot.get("n_ctx")
        total += n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else 0
        if slot.get("is_processing") is True:
            prompt = slot.get("n_prompt_tokens")
            held += prompt if isinstance(prompt, int) and prompt > 0 else 0
            for nxt in slot.get("next_token") or []:
                decoded = nxt.get("n_decoded") if isinstance(nxt, dict) else None
                held += decoded if isinstance(decoded, int) and decoded > 0 else 0
    return min(held / total, 1.0) if total else 0.0


class ReplicaSignals(Collector):
    """Polls every ready replica of llmgw's engines and exports what it read; registered beside
    `Metrics` in the server's registry."""

    def __init__(self, table: Callable[[], RoutingTable], fetch: Fetch | None = None,
                 timeout_s: float = 2.0) -> None:
        self._table = table
        self._fetch = fetch
        self._timeout_s = timeout_s
        self.latest: dict[tuple[str, str], Signals] = {}  # (model, replica) -> signals

    async def poll(self) -> None:
        """Read every ready local replica once, at the same time; forget the others."""
        fetch = self._fetch
        assert fetch is not None, "poll() runs within run(), or with a fetch of its own"
        targets = [(name, up) for name, route in self._table().routes.items()
                   if not route.model.is_remote for up in route.upstreams]
        read = await asyncio.gather(*(self._read(fetch, up) for _, up in targets))
        self.latest = {(name, up.id): signals for (name, up), signals in zip(targets, read, strict=True)
                       if signals is not None}

    async def _read(self, fetch: Fetch, up: Upstream) -> Signals | None:
        try:
            async with asyncio.timeout(self._timeout_s):
                gauges = parse_metrics(await fetch(up, "/metrics"))
                kv = gauges.get("kv_cache_usage_ratio")
                if kv is None:
                    kv = kv_from_slots(await fetch(up, "/slots"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a replica busy or gone: no figures rather than stale ones
            logger.debug("replica %s: no signals (%s)", up.id, type(exc).__name__)
            return None
        return Signals(gauges.get("requests_deferred", 0.0), gauges.get("requests_processing", 0.0),
                       kv)

    async def run(self, interval_s: float) -> None:
        """Poll every `interval_s` seconds until cancelled, over an HTTP client of its own
        unless one was given."""
        async with contextlib.AsyncExitStack() as stack:
            if self._fetch is None:
                session = await stack.enter_async_context(aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self._timeout_s)))
                self._fetch = http_fetch(session)
            while True:
                await self.poll()
                await asyncio.sleep(interval_s)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        queued, running, kv = REPLICA_QUEUED.gauge(), REPLICA_RUNNING.gauge(), REPLICA_KV_CACHE.gauge()
        for (model, replica), s in sorted(self.latest.items()):
            queued.add_metric([model, replica], s.queued)
            running.add_metric([model, replica], s.running)
            kv.add_metric([model, replica], s.kv_cache)
        yield queued
        yield running
        yield kv


def http_fetch(session: aiohttp.ClientSession) -> Fetch:
    """Fetch over `session`, with the replica's own headers (the engine key); never redirected:
    it would carry the key elsewhere."""

    async def fetch(up: Upstream, path: str) -> bytes:
        root = up.base_url.removesuffix("/").removesuffix("/v1")
        async with session.get(root + path, headers=up.headers, allow_redirects=False) as resp:
            resp.raise_for_status()
            return await resp.content.read(1 << 20)  # bounded: a replica's word is not trusted

    return fetch
