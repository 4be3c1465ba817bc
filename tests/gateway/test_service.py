"""The data plane with a request queue: a request for a local model with no ready replica waits
for one, through llmgw's real routes and the official clients."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import anthropic
import openai
import pytest

from llmgw.core.cache import CacheMode, CacheSpec
from llmgw.core.clock import FakeClock
from llmgw.core.routes import RouteSpec, Target
from llmgw.core.settings import CacheSettings, ControlSettings
from llmgw.core.types import LocalSource, Model, Profile, Scaling
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.cache.memory import MemoryCache
from llmgw.gateway.cache.service import ResponseCache
from llmgw.gateway.cache.store import InMemory
from llmgw.gateway.fair import FairShare
from llmgw.gateway.limits import Limiter
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.queue import QUEUE_FULL_RETRY_S, ColdQueue
from llmgw.gateway.service import Gateway
from llmgw.gateway.snapshot import Refresher, Snapshot
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.guard.enforcement import Guard
from llmgw.store.store import Store
from tests.factories import gemma_model, qwen_guard_model, remote_model
from tests.fakes.provider import ANSWER, FakeProvider, GatewayRig

ON_DEMAND = Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")],
                  scaling=Scaling(min=0, max=1))
MESSAGES = [{"role": "user", "content": "hi"}]


class WatchedQueue(ColdQueue):
    """The queue, telling the test when a model goes cold and when a request leaves."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(ControlSettings(**settings), time.monotonic, lambda m: self.cold.put_nowait(m))
        self.cold: asyncio.Queue[str] = asyncio.Queue()
        self.left: asyncio.Queue[None] = asyncio.Queue()

    async def wait(self, route: Serving, current: Any) -> Serving:
        try:
            return await super().wait(route, current)
        finally:
            self.left.put_nowait(None)


async def next_one(queue: asyncio.Queue[Any], what: str) -> Any:
    try:
        return await asyncio.wait_for(queue.get(), 5)
    except TimeoutError:
        pytest.fail(f"{what} never happened")


@contextlib.asynccontextmanager
async def cold_rig(
    tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[GatewayRig, WatchedQueue, openai.AsyncOpenAI]]:
    """The data plane with model `m` on demand and, for now, no replica of it anywhere; and an
    OpenAI client of it."""
    provider = await FakeProvider().start()
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    queue = WatchedQueue(**settings)
    rig = GatewayRig(provider, store, model=ON_DEMAND, queue=queue)
    rig.metrics = Metrics(lambda: rig.refresher.current.table if rig.refresher else RoutingTable({}),
                          queued=queue.depths)
    await rig.start()
    publish(rig, Serving(ON_DEMAND, (), unavailable="no replica is placed yet (the model starts on demand)"))
    try:
        async with rig.openai() as client:
            yield rig, queue, client
    finally:
        await rig.close()
        await provider.close()
        store.close()


def publish(rig: GatewayRig, route: Serving) -> None:
    """A new snapshot with `route` for `m`, handed to the queue as the refresher hands it."""
    assert rig.refresher is not None and rig.queue is not None
    snap = rig.refresher.current
    table = RoutingTable({"m": route})
    rig.refresher.current = replace(snap, revision=snap.revision + 1, table=table)
    rig.queue.refreshed(table)


def waits(rig: GatewayRig) -> int:
    """How many waits the queue-wait histogram counted."""
    assert rig.metrics is not None
    return sum(sum(counts) for counts in rig.metrics.queue_waits.counts.values())


def statuses(rig: GatewayRig) -> dict[str, int]:
    """Requests counted per status."""
    assert rig.metrics is not None
    out: dict[str, int] = {}
    for (_model, status, _key, _api), n in rig.metrics.requests.items():
        out[status] = out.get(status, 0) + n
    return out


def ready(rig: GatewayRig) -> Serving:
    return Serving(ON_DEMAND, (Upstream("replica-1", rig.provider.url),))


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_for_a_cold_model_waits_and_is_answered_once_a_replica_is_ready(
    tmp_path: Path, stream: bool
) -> None:
    async with cold_rig(tmp_path) as (rig, queue, client):
        call = asyncio.create_task(client.chat.completions.create(
            model="m", messages=MESSAGES, stream=stream))
        assert await next_one(queue.cold, "the model going cold") == "m"
        publish(rig, Serving(ON_DEMAND, (), unavailable="starting", loading_on="node-1"))
        assert not call.done()  # not even a stream's headers: no replica has answered yet
        assert rig.provider.requests == []

        publish(rig, ready(rig))
        answer = await call
        if stream:
            text = "".join([c.choices[0].delta.content or "" async for c in answer if c.choices])
        else:
            text = answer.choices[0].message.content
        assert text == ANSWER
        assert len(rig.provider.requests) == 1
        assert queue.depths() == {}
        assert waits(rig) == 1


async def test_an_answered_request_marks_when_its_replica_was_last_used(tmp_path: Path) -> None:
    async with cold_rig(tmp_path) as (rig, _queue, client):
        route = ready(rig)
        publish(rig, route)
        before = time.time()
        await client.chat.completions.create(model="m", messages=MESSAGES)
        [up] = route.upstreams
        assert up.outstanding == 0 and before <= up.last_used <= time.time()


async def test_a_full_queue_is_a_429_with_retry_after_in_the_openai_dialect(tmp_path: Path) -> None:
    async with cold_rig(tmp_path, queue_max=1) as (rig, queue, client):
        first = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
        await next_one(queue.cold, "the first request queueing")

        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(model="m", messages=MESSAGES)

        assert caught.value.response.headers["Retry-After"] == str(QUEUE_FULL_RETRY_S)
        assert caught.value.code == "queue_full"
        assert "queue for it is full (1 waiting)" in caught.value.message
        publish(rig, ready(rig))
        assert (await first).choices[0].message.content == ANSWER
        assert waits(rig) == 1  # the one turned away never waited
        assert statuses(rig) == {"200": 1, "429": 1}


async def test_a_full_queue_is_a_429_with_retry_after_in_the_anthropic_dialect(tmp_path: Path) -> None:
    async with cold_rig(tmp_path, queue_max=1) as (rig, queue, client):
        waiting = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
        await next_one(queue.cold, "the first request queueing")

        async with rig.anthropic() as claude:
            with pytest.raises(anthropic.RateLimitError) as caught:
                await claude.messages.create(model="m", max_tokens=16,
                                             messages=[{"role": "user", "content": "hi"}])

        assert caught.value.response.headers["Retry-After"] == str(QUEUE_FULL_RETRY_S)
        assert caught.value.body == {"type": "error", "error": {
            "type": "rate_limit_error", "message": caught.value.body["error"]["message"]}}
        assert "queue for it is full" in caught.value.message
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting


async def test_a_request_past_the_queue_timeout_is_a_503_saying_what_it_waited_for(tmp_path: Path) -> None:
    async with cold_rig(tmp_path, queue_timeout_s=0.2) as (rig, queue, client):
        call = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
        await next_one(queue.cold, "the request queueing")
        publish(rig, Serving(ON_DEMAND, (), unavailable="starting", loading_on="node-2"))

        with pytest.raises(openai.InternalServerError) as caught:
            await call

        assert caught.value.status_code == 503
        assert caught.value.code == "queue_timeout"
        assert re.search(r"503 - m is loading on node-2: waited \d+ s$", caught.value.message)
        assert rig.provider.requests == []
        assert waits(rig) == 1 and statuses(rig) == {"503": 1}


async def test_a_client_that_leaves_while_queued_leaves_the_queue(tmp_path: Path) -> None:
    async with cold_rig(tmp_path, queue_max=1) as (rig, queue, client):
        gone = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
        await next_one(queue.cold, "the request queueing")

        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        await next_one(queue.left, "the request leaving the queue")
        assert queue.depths() == {}

        # Its place is free: the next request queues (a new cold episode) and is answered.
        after = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
        assert await next_one(queue.cold, "the next request queueing") == "m"
        publish(rig, ready(rig))
        assert (await after).choices[0].message.content == ANSWER
        assert len(rig.provider.requests) == 1


async def test_a_model_that_fits_on_no_node_is_a_503_at_once_with_the_schedulers_reason(
    tmp_path: Path,
) -> None:
    async with cold_rig(tmp_path) as (rig, queue, client):
        publish(rig, Serving(ON_DEMAND, (), unavailable="pending: node big has 1.0 GB free, needs 8.0 GB",
                           nowhere="node big has 1.0 GB free, needs 8.0 GB"))

        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="m", messages=MESSAGES)

        assert caught.value.status_code == 503 and caught.value.code == "no_ready_replica"
        assert "node big has 1.0 GB free, needs 8.0 GB" in caught.value.message
        assert queue.cold.empty()  # it never queued, so it called for no replica


def test_a_routes_requests_are_judged_by_policies_of_its_name_and_of_every_target() -> None:
    from typing import cast

    from llmgw.core.clock import FakeClock
    from llmgw.core.guard import Direction, Policy
    from llmgw.core.routes import RouteSpec, Target
    from llmgw.gateway.covering import route_policies as _route_policies
    from llmgw.gateway.upstream.router import Router
    from llmgw.guard.enforcement import Guard

    covering = {"chat": [Policy(name="on-route", judges=["j"])],
                "a": [Policy(name="on-a", judges=["j"]), Policy(name="on-route", judges=["j"])],
                "b": [Policy(name="on-b", judges=["j"], input=False, output=True)]}

    class Policies:
        def policies(self, model: str, _key: str, direction: Direction) -> list[Policy]:
            return [p for p in covering.get(model, [])
                    if (p.input if direction == Direction.INPUT else p.output)]

    model = Model(name="x", source=LocalSource(path="/x.gguf"), profiles=[Profile(name="cpu")])
    table = RoutingTable({n: Serving(model.model_copy(update={"name": n}), (Upstream(n, "http://h"),))
                          for n in ("a", "b")})
    spec = RouteSpec(name="chat", targets=[Target(model="a"), Target(model="b")])
    plan = Router(FakeClock()).plan(spec, table)
    inputs, outputs = _route_policies(cast(Guard, Policies()), plan, "k")
    assert [p.name for p in inputs] == ["on-route", "on-a"]  # each once, whichever covers it
    assert [p.name for p in outputs] == ["on-b"]  # the fallback's policy too


def test_each_served_name_runs_only_the_stages_that_apply_to_it(store: Store, clock: FakeClock) -> None:
    """Built with the snapshot: a model without a guard or a cache runs `limits -> upstream`
    (the path as it always was); the cache only where it is on for the model or route, the queue
    only for a model that may start on demand, the guard never for a judge's own calls."""
    cached = remote_model("cached").model_copy(update={"cache": CacheSpec(mode=CacheMode.EXACT)})
    models = [remote_model("plain"), cached, gemma_model(), qwen_guard_model()]
    refresher = Refresher(store, b"\x01" * 32)
    refresher.current = Snapshot(1, KeyCache(b"\x01" * 32, []), RoutingTable(
        {m.name: Serving(m, (Upstream(m.name, "http://127.0.0.1:9/v1"),)) for m in models}),
        route_specs={"front": RouteSpec(name="front", targets=[Target(model="plain")])})

    plain = Gateway(refresher, Transport(1.0), clock, limiter=Limiter(None, clock.now))
    chains = refresher.current.chains
    assert {name: chains[name].names for name in chains} == {
        name: ("limits", "upstream") for name in ("plain", "cached", "gemma3-270m", "qwen3guard-0.6b",
                                                  "front")}
    assert plain.cache is None

    Gateway(refresher, Transport(1.0), clock, cast(Guard, object()), Limiter(None, clock.now),
            queue=ColdQueue(ControlSettings(), clock.monotonic, lambda _name: None),
            cache=ResponseCache(CacheSettings(), InMemory(MemoryCache(10, 10_000, clock.monotonic))))
    chains = refresher.current.chains
    assert chains["plain"].names == ("limits", "guard", "upstream")
    assert chains["cached"].names == ("limits", "cache", "guard", "upstream")
    assert chains["gemma3-270m"].names == ("limits", "queue", "guard", "upstream")
    assert chains["qwen3guard-0.6b"].names == ("limits", "queue", "upstream")
    assert chains["front"].names == ("limits", "queue", "guard", "upstream")

    # Fair shares before the guard (whose way out waits for the slot after judgment), for a
    # model on llmgw's own engines only: a remote's never.
    Gateway(refresher, Transport(1.0), clock, cast(Guard, object()), Limiter(None, clock.now),
            fair=FairShare(60.0, clock.monotonic))
    chains = refresher.current.chains
    assert chains["gemma3-270m"].names == ("limits", "fair", "guard", "upstream")
    assert chains["plain"].names == ("limits", "guard", "upstream")
    assert chains["front"].names == ("limits", "guard", "upstream")


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path, gateways: int = 1
                       ) -> AsyncIterator[tuple[list[FakeProvider], list[openai.AsyncOpenAI]]]:
    """Model `m` on two replicas (fake engines), served by `gateways` gateways that share nothing
    but the routing table (as two workers or two servers do); an OpenAI client of each."""
    reps = [await FakeProvider().start(), await FakeProvider().start()]
    stores = [Store.open(f"sqlite:///{tmp_path / f'{n}.db'}") for n in range(gateways)]
    rigs = [await GatewayRig(reps[0], store).start() for store in stores]
    for rig in rigs:
        assert rig.refresher is not None
        model = rig.refresher.current.table.routes["m"].model
        ups = (Upstream("rep-a", reps[0].url), Upstream("rep-b", reps[1].url))
        rig.refresher.current = replace(rig.refresher.current,
                                        table=RoutingTable({"m": Serving(model, ups)}))
    clients = [rig.openai() for rig in rigs]
    try:
        yield reps, clients
    finally:
        for client in clients:
            await client.close()
        for rig in rigs:
            await rig.close()
        for rep in reps:
            await rep.close()
        for store in stores:
            store.close()


async def test_two_gateways_with_the_same_snapshot_send_a_conversation_to_the_same_replica(
        tmp_path: Path) -> None:
    # A conversation's turns alternate between the two gateways.
    async with two_replicas(tmp_path, gateways=2) as (reps, clients):
        for n in range(8):
            history: list[Any] = [{"role": "system", "content": f"Agent {n}. " + "Rules. " * 200}]
            for turn in range(4):
                history.append({"role": "user", "content": f"question {turn}"})
                await clients[turn % 2].chat.completions.create(model="m", messages=history)
                history.append({"role": "assistant", "content": ANSWER})
        served = [{body["messages"][0]["content"] for body in rep.requests} for rep in reps]
        counts = [len(rep.requests) for rep in reps]
        assert not served[0] & served[1]  # no conversation on both
        assert sum(counts) == 32 and min(counts) >= 8  # and not all on one


async def test_a_session_header_keeps_unrelated_prompts_on_one_replica(tmp_path: Path) -> None:
    async with two_replicas(tmp_path) as (reps, (client,)):
        for n in range(8):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"task {n}"}],
                extra_headers={"X-Llmgw-Session": "ticket-4711"})
        assert sorted(len(rep.requests) for rep in reps) == [0, 8]
        for n in range(8):  # the same prompts without a session spread
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"task {n}"}])
        assert min(len(rep.requests) for rep in reps) > 0
