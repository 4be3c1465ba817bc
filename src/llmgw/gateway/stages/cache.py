"""The cache stage: answer a call from the response cache, or keep its answer when it ends.

Where the cache keeps a request's answer (`Probe`) is made under the output policies that pass
it as they stand, so a changed policy makes every key it affects a new one; a kept answer is
told again only once the input guard passed the request that asks for it; a missed request's
answer is kept when the cache admits it (`cache.service.admits`) and it can be told again
whole."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable

from llmgw.core.cache import CacheSpec
from llmgw.core.guard import Direction
from llmgw.gateway.cache.capture import CapturingTap
from llmgw.gateway.cache.entry import CachedAnswer
from llmgw.gateway.cache.replay import replay
from llmgw.gateway.cache.semantic import Vector
from llmgw.gateway.cache.service import HIT, MISS, Probe, ResponseCache, admits
from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.chain import Next, Stage
from llmgw.gateway.covering import policies
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.usage import Tokens
from llmgw.guard.enforcement import Guard, RequestInfo


def stage(cache: ResponseCache, spec: CacheSpec | None, epochs: dict[str, str],
          guard: Guard | None, metrics: Metrics | None) -> Stage:
    """The cache stage of a model or route whose own cache settings are `spec`, under the
    install's cache `epochs` (a purge starts a new one)."""
    charge = cache.settings.charge_hits

    def cached(call: UpstreamCall, nxt: Next) -> Awaitable[Reply]:
        out = call.out
        probe = None if out is None else _probe(cache, spec, epochs, guard, call)
        if probe is None:
            return nxt(call)
        exchange = call.exchange
        if probe.store:
            # Its answer is read again to be kept: it keeps the bytes a plain tap only counts.
            assert out is not None
            exchange.tap = CapturingTap(out.wire.usage, out.wire.answer_text, out.wire.event_text,
                                        cache.max_answer_bytes)
        return _served(cache, probe, guard, metrics, charge, call, nxt)

    return cached


async def _served(cache: ResponseCache, probe: Probe, guard: Guard | None,
                  metrics: Metrics | None, charge: bool, call: UpstreamCall, nxt: Next) -> Reply:
    exchange = call.exchange
    hit: CachedAnswer | None = None
    vector: Vector | None = None

    def ended(status: int, tokens: Tokens) -> None:
        """Count the look-up (what a hit saved; a hit the input guard refused saved nothing);
        for a miss, keep its answer when the cache admits it and it can be told again whole."""
        saved = None
        if hit is not None:
            saved = hit.prompt_tokens + hit.completion_tokens if status < 400 else None
        else:
            tap = exchange.tap
            if isinstance(tap, CapturingTap) and admits(probe, exchange, status):
                answer = tap.answer(tokens)
                if answer is not None:
                    cache.keep(probe, answer, vector)
        exchange.saved = saved
        if metrics is not None and status < 400:
            metrics.cache_lookup(call.ask.model, saved is not None, saved or 0)

    exchange.closers.append(ended)
    if probe.lookup:
        hit, vector = await cache.lookup(probe)
        if hit is not None:
            # Counted as no tokens used unless hits are charged: no upstream generated them.
            exchange.charged = Tokens(hit.prompt_tokens, hit.completion_tokens) if charge \
                else Tokens()
            return await _replayed(guard, call, hit)
    reply = await nxt(call)
    if reply.headers is None:
        reply.headers = MISS
    return reply


def _probe(cache: ResponseCache, spec: CacheSpec | None, epochs: dict[str, str],
           guard: Guard | None, call: UpstreamCall) -> Probe | None:
    """Where the cache keeps this request's answer, or None when it is not for it."""
    cache.follow(epochs)

    def guarded() -> str:
        outputs = policies(guard, call)[1]
        return hashlib.sha256(b"".join(p.model_dump_json(exclude={"by", "created_at"}).encode()
                                       for p in outputs)).hexdigest()[:16] if outputs else ""

    return cache.probe(call.api, call.payload, call.key, call.ask.model, spec, call.said, guarded,
                       lambda: [(t.role, t.content) for t in call.ask.turns])


async def _replayed(guard: Guard | None, call: UpstreamCall, hit: CachedAnswer) -> Reply:
    """A kept answer, once the input guard passed the request that asks for it."""
    inputs = policies(guard, call)[0]
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

