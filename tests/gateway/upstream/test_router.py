"""Routes through llmgw's real data plane, in front of fake upstreams that fail in each way:
fallbacks, cooldowns, retries, weights and the caller's dialect for every failure."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.routes import Cooldown, FailOn, Fallback, Retry, RouteSpec, Strategy, Target
from llmgw.core.types import LocalSource, Model, Profile
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.route_metrics import RouteMetrics
from llmgw.gateway.upstream.router import Router
from llmgw.gateway.upstream.strategies import LeftOut
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.store.store import Store
from tests.factories import remote_model
from tests.fakes.provider import ANSWER, USAGE, FakeProvider, GatewayRig

ASK: Any = [{"role": "user", "content": "How wide is the sea?"}]
# Nothing listens here: connecting is refused at once.
REFUSED = "http://127.0.0.1:9/v1"
CONTEXT_ERROR = orjson.dumps({"error": {"message": "This model's maximum context length is 8192",
                                        "type": "invalid_request_error",
                                        "code": "context_length_exceeded", "param": "messages"}})


def local(name: str) -> Model:
    return Model(name=name, source=LocalSource(path=f"/{name}.gguf"), profiles=[Profile(name="cpu")])


def route_spec(*targets: str, **over: Any) -> RouteSpec:
    """Serving `chat` in front of `targets`, trying each once by default."""
    return RouteSpec(name="chat", targets=[Target(model=t) for t in targets], **over)


@dataclass
class Routed:
    """A data plane with catalog models `a`, `b`, … each served by its own fake, and route `chat`."""

    rig: GatewayRig
    providers: dict[str, FakeProvider]
    router: Router
    clock: FakeClock
    waits: list[float] = field(default_factory=list)
    metrics: Metrics | None = None

    def client(self) -> openai.AsyncOpenAI:
        return self.rig.openai()

    async def ask(self, model: str = "chat") -> str:
        async with self.client() as client:
            answer = await client.chat.completions.create(model=model, messages=ASK)
        return answer.choices[0].message.content or ""

    def calls(self, name: str) -> int:
        return len(self.providers[name].requests)

    async def usage(self) -> dict[str, tuple[int, int, int]]:
        """(requests, total tokens, errors) by model, once the meter wrote them."""
        assert self.rig.meter is not None
        await self.rig.meter.flush()
        return {r.model: (r.requests, r.prompt_tokens + r.completion_tokens, r.errors)
                for r in self.rig.store.usage.usage()}

    def scraped(self) -> str:
        assert self.metrics is not None
        return self.metrics.render().decode()


@asynccontextmanager
async def routed(store: Store, spec: RouteSpec, *, remote: frozenset[str] = frozenset(),
                 refused: frozenset[str] = frozenset(), timeout_s: float = 30.0,
                 seed: int = 1, **fakes: FakeProvider) -> AsyncIterator[Routed]:
    """Serving `spec` in front of one fake per target (`fakes` by name; a name in `refused` gets a
    URL where nothing listens; one in `remote` is a remote provider's model)."""
    providers = {n: await (fakes.get(n) or FakeProvider()).start() for t in spec.targets
                 for n in [t.model]}
    first = next(iter(providers.values()))
    rig = await GatewayRig(first, store, timeout_s=timeout_s).start()
    clock = FakeClock()
    waits: list[float] = []

    async def wait(seconds: float) -> None:  # a retry's backoff, without waiting it
        waits.append(seconds)

    router = Router(clock, random.Random(seed).random, sleep=wait)
    assert rig.gateway is not None and rig.refresher is not None
    rig.gateway.router = router
    routes = dict(rig.refresher.current.table.routes)
    for name, fake in providers.items():
        url = REFUSED if name in refused else fake.url
        if name in remote:
            model = remote_model(name, base_url=url, api_key_env=None)
            routes[name] = Serving(model, (Upstream(f"remote:{name}", url),))
        else:
            routes[name] = Serving(local(name), (Upstream(f"{name}-1", url),))
    table = RoutingTable(routes)
    rig.refresher.current = replace(rig.refresher.current, table=table,
                                    route_specs={spec.name: spec})
    metrics = Metrics(lambda: table)
    metrics.registry.register(RouteMetrics(router, lambda: {spec.name: spec}, clock))
    try:
        yield Routed(rig, providers, router, clock, waits, metrics)
    finally:
        await rig.close()
        for p in providers.values():
            await p.close()


FAILURES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # way of failing: (how `a` fails, what else the route needs)
    "5xx": ({"a": FakeProvider(status=500, error_body=b"<html>oops</html>")}, {}),
    "429": ({"a": FakeProvider(status=429, error_headers={"Retry-After": "5"})}, {}),
    "connect": ({}, {"refused": frozenset({"a"})}),
    "timeout": ({"a": FakeProvider(stall=True)}, {"timeout_s": 1.0}),
    "context-length": ({"a": FakeProvider(status=400, error_body=CONTEXT_ERROR)},
                       {"on": [FailOn.CONTEXT_LENGTH]}),
}


@pytest.mark.parametrize("way", list(FAILURES))
async def test_the_fallback_target_answers_once_and_is_the_one_counted(store: Store, way: str) -> None:
    fakes, extra = FAILURES[way]
    on = extra.pop("on", None)
    spec = route_spec("a", "b", **({"fallback": Fallback(on=on)} if on else {}))
    async with routed(store, spec, **fakes, **extra) as r:
        assert await r.ask() == ANSWER  # one success: the client never saw `a` fail
        assert r.calls("b") == 1
        # Counted once, against the model that answered, with the tokens it reported.
        assert await r.usage() == {"b": (1, USAGE["total_tokens"], 0)}
        assert (f'llmgw_route_fallbacks_total{{from_target="a",reason="{way}",route="chat",'
                'to_target="b"} 1.0') in r.scraped()
        # A prompt too long for a target is no sign of its health: it counts to no cooldown.
        assert r.router.cooldowns.quiet("chat") == (way == "context-length")


async def test_a_stream_cut_after_its_first_byte_is_not_tried_again(store: Store) -> None:
    async with routed(store, route_spec("a", "b"), a=FakeProvider(cut_after=2)) as r:
        async with r.client() as client:
            events = await client.chat.completions.create(model="chat", messages=ASK, stream=True)
            with pytest.raises(openai.APIError):  # the dialect's error event ends the stream
                async for _ in events:
                    pass
        assert r.calls("a") == 1 and r.calls("b") == 0
        assert "llmgw_route_fallbacks_total{" not in r.scraped()


async def test_a_stream_falls_back_before_its_first_byte(store: Store) -> None:
    async with routed(store, route_spec("a", "b"), a=FakeProvider(status=503)) as r:
        async with r.client() as client:
            events = await client.chat.completions.create(model="chat", messages=ASK, stream=True)
            text = "".join([c.delta.content or "" async for e in events for c in e.choices])
        assert text == ANSWER
        assert (await r.usage())["b"][0] == 1


async def test_a_clients_own_error_is_answered_and_not_tried_elsewhere(store: Store) -> None:
    bad = orjson.dumps({"error": {"message": "temperature is out of range", "type":
                                  "invalid_request_error", "param": "temperature"}})
    async with routed(store, route_spec("a", "b"), a=FakeProvider(status=400, error_body=bad)) as r:
        with pytest.raises(openai.BadRequestError) as raised:
            await r.ask()
        assert raised.value.param == "temperature"
        assert r.calls("b") == 0


async def test_a_failure_the_route_does_not_fall_back_on_is_answered(store: Store) -> None:
    spec = route_spec("a", "b", fallback=Fallback(on=[FailOn.CONNECT]))
    async with routed(store, spec, a=FakeProvider(status=500)) as r:
        with pytest.raises(openai.InternalServerError) as raised:
            await r.ask()
        assert raised.value.status_code == 502
        assert r.calls("b") == 0


async def test_attempts_bound_how_many_targets_one_request_tries(store: Store) -> None:
    spec = route_spec("a", "b", "c", fallback=Fallback(attempts=2))
    async with routed(store, spec, a=FakeProvider(status=500), b=FakeProvider(status=500)) as r:
        with pytest.raises(openai.InternalServerError):
            await r.ask()
        assert (r.calls("a"), r.calls("b"), r.calls("c")) == (1, 1, 0)
        assert (await r.usage())["chat"] == (1, 0, 1)  # the failure is the route's


async def test_a_target_that_keeps_failing_cools_down_then_is_tried_again(store: Store) -> None:
    spec = route_spec("a", "b", fallback=Fallback(
        cooldown=Cooldown(failures=2, window_s=60, cooldown_s=30)))
    async with routed(store, spec, a=FakeProvider(status=500)) as r:
        for _ in range(2):
            assert await r.ask() == ANSWER
        assert r.calls("a") == 2
        cooling = 'llmgw_route_target_cooling_down{route="chat",target="a"} 1.0'
        assert cooling in r.scraped()
        assert await r.ask() == ANSWER
        assert r.calls("a") == 2 and r.calls("b") == 3  # skipped while it cools down

        r.clock.advance(29)
        assert await r.ask() == ANSWER
        assert r.calls("a") == 2
        r.clock.advance(1)  # its cooldown is over, and it works again
        r.providers["a"].status = 200
        assert await r.ask() == ANSWER
        assert (r.calls("a"), r.calls("b")) == (3, 4)
        assert 'llmgw_route_target_cooling_down{route="chat",target="a"} 0.0' in r.scraped()
        assert 'llmgw_route_cooldowns_total{route="chat",target="a"} 1.0' in r.scraped()


async def test_a_route_whose_every_target_cools_down_answers_503_at_once(store: Store) -> None:
    spec = route_spec("a", fallback=Fallback(cooldown=Cooldown(failures=1, window_s=60, cooldown_s=30)))
    async with routed(store, spec, a=FakeProvider(status=500)) as r:
        with pytest.raises(openai.InternalServerError):
            await r.ask()
        with pytest.raises(openai.APIStatusError) as raised:
            await r.ask()
        assert raised.value.status_code == 503
        assert "cooling down" in raised.value.message
        assert r.calls("a") == 1


async def test_a_remote_providers_429_is_retried_after_its_retry_after(store: Store) -> None:
    spec = route_spec("a", "b", retry=Retry(attempts=2, backoff_ms=100))
    a = FakeProvider(fail_next=[429], error_headers={"Retry-After": "3"})
    async with routed(store, spec, remote=frozenset({"a"}), a=a) as r:
        assert await r.ask() == ANSWER
        assert r.waits == [3.0]  # longer than the backoff: the provider's word is kept
        assert (r.calls("a"), r.calls("b")) == (2, 0)
        assert 'llmgw_route_retries_total{reason="429",route="chat",target="a"} 1.0' in r.scraped()
        assert (await r.usage())["a"][0] == 1


async def test_a_retry_after_beyond_the_requests_timeout_falls_back_at_once(store: Store) -> None:
    spec = route_spec("a", "b", retry=Retry(attempts=2))
    a = FakeProvider(status=503, error_headers={"Retry-After": "120"})
    async with routed(store, spec, remote=frozenset({"a"}), timeout_s=30, a=a) as r:
        assert await r.ask() == ANSWER
        assert r.waits == [] and r.calls("a") == 1 and r.calls("b") == 1


async def test_connect_errors_are_retried_with_doubling_backoff_then_fall_back(store: Store) -> None:
    spec = route_spec("a", "b", retry=Retry(attempts=2, backoff_ms=100, max_backoff_ms=150))
    async with routed(store, spec, refused=frozenset({"a"})) as r:
        assert await r.ask() == ANSWER
        assert r.waits == [0.1, 0.15]


async def test_a_local_engines_503_is_not_retried_on_it(store: Store) -> None:
    spec = route_spec("a", "b", retry=Retry(attempts=3))
    async with routed(store, spec, a=FakeProvider(status=503)) as r:
        assert await r.ask() == ANSWER
        assert r.waits == [] and r.calls("a") == 1


async def test_a_remote_target_is_told_its_own_name_not_the_routes(store: Store) -> None:
    async with routed(store, route_spec("a"), remote=frozenset({"a"})) as r:
        assert await r.ask() == ANSWER
        assert r.providers["a"].requests[0]["model"] == "a"


async def test_weighted_routing_over_1000_requests_lands_within_5_points_of_the_weights(
    store: Store,
) -> None:
    spec = RouteSpec(name="chat", targets=[Target(model="a", weight=3), Target(model="b", weight=1)],
                     strategy=Strategy.WEIGHTED)
    async with routed(store, spec) as r, aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {r.rig.plaintext}"}
        body = {"model": "chat", "messages": ASK}
        for _ in range(1000):
            async with http.post(r.rig.url + "/v1/chat/completions", json=body, headers=headers) as resp:
                assert resp.status == 200
        assert abs(r.calls("a") / 1000 - 0.75) <= 0.05 and r.calls("a") + r.calls("b") == 1000


async def test_a_client_cannot_add_fallbacks_to_its_request(store: Store) -> None:
    async with routed(store, route_spec("a", "b"), a=FakeProvider(status=500)) as r:
        async with r.client() as client:
            with pytest.raises(openai.InternalServerError):
                await client.chat.completions.create(model="a", messages=ASK,
                                                     extra_body={"fallbacks": ["b"], "models": ["b"]})
        assert r.calls("b") == 0


async def test_models_lists_the_routes_a_key_may_use(store: Store) -> None:
    async with routed(store, route_spec("a")) as r:
        assert r.rig.gateway is not None and r.rig.key is not None
        gw = r.rig.gateway
        assert "chat" in dict(gw.listed(r.rig.key))
        only_a = r.rig.key.model_copy(update={"models": ["a"]})
        assert "chat" not in dict(gw.listed(only_a))
        only_chat = r.rig.key.model_copy(update={"models": ["chat"]})
        assert [n for n, _ in gw.listed(only_chat)] == ["chat"]
        async with r.client() as client:
            assert "chat" in [m.id async for m in client.models.list()]




async def _messages(r: Routed) -> Any:
    async with r.rig.anthropic() as client:
        return await client.messages.create(model="chat", max_tokens=16, messages=ASK)


async def test_a_route_that_fails_everywhere_answers_anthropics_error_on_messages(store: Store) -> None:
    async with routed(store, route_spec("a", "b"), a=FakeProvider(status=500),
                      b=FakeProvider(status=502)) as r:
        with pytest.raises(anthropic.InternalServerError) as raised:
            await _messages(r)
        body = raised.value.body
        assert isinstance(body, dict) and body["type"] == "error"
        assert body["error"]["type"] == "api_error"


async def test_a_cooling_route_answers_openais_error_on_responses(store: Store) -> None:
    spec = route_spec("a", fallback=Fallback(cooldown=Cooldown(failures=1)))
    async with routed(store, spec, a=FakeProvider(status=500)) as r:
        async with r.client() as client:
            for status in (502, 503):
                with pytest.raises(openai.APIStatusError) as raised:
                    await client.responses.create(model="chat", input="How wide is the sea?")
                assert raised.value.status_code == status
        body = raised.value.body
        assert isinstance(body, dict) and body["code"] == "route_cooling_down"
        # When to come back: the default 30 s cooldown, which has only just begun.
        assert raised.value.response.headers["retry-after"] in ("29", "30")


def plain_table(**ready: bool) -> RoutingTable:
    """Local models by name, each with one replica when `ready`, none (cold) otherwise."""
    return RoutingTable({n: Serving(local(n), (Upstream(f"{n}-1", "http://127.0.0.1:1/v1"),) if up
                                  else (), unavailable="" if up else "starting")
                         for n, up in ready.items()})


def test_a_plan_skips_cold_targets_while_another_is_ready() -> None:
    router = Router(FakeClock())
    plan = router.plan(route_spec("a", "b", "c"), plain_table(a=False, b=True, c=True))
    assert [t.model.name for t in plan.targets] == ["b", "c"]
    assert plan.left_out == {"a": LeftOut.NOT_READY}


def test_a_plan_with_no_ready_target_queues_for_the_first_cold_one() -> None:
    router = Router(FakeClock())
    plan = router.plan(route_spec("gone", "a", "b"), plain_table(a=False, b=False))
    assert [t.model.name for t in plan.targets] == ["a"]
    assert plan.left_out == {"gone": LeftOut.MISSING, "a": LeftOut.NOT_READY, "b": LeftOut.NOT_READY}


def test_a_plan_says_which_target_cools_down() -> None:
    router = Router(FakeClock())
    spec = route_spec("a", "b", fallback=Fallback(cooldown=Cooldown(failures=1)))
    router.failed(spec, "a", FailOn.SERVER_ERROR)
    plan = router.plan(spec, plain_table(a=True, b=True))
    assert [t.model.name for t in plan.targets] == ["b"]
    assert plan.left_out == {"a": LeftOut.COOLING}


def test_a_route_whose_targets_left_the_catalog_is_a_503_saying_so() -> None:
    from llmgw.core.errors import NoReadyReplica

    with pytest.raises(NoReadyReplica, match="none of its models is in the catalog"):
        Router(FakeClock()).plan(route_spec("gone"), plain_table(a=True))


def test_a_plan_follows_a_new_table_and_a_changed_route() -> None:
    router = Router(FakeClock())
    spec = route_spec("a", "b")
    assert [t.model.name for t in router.plan(spec, plain_table(a=True, b=True)).targets] == ["a", "b"]
    assert [t.model.name for t in router.plan(spec, plain_table(a=False, b=True)).targets] == ["b"]
    changed = route_spec("b", "a")
    assert [t.model.name for t in router.plan(changed, plain_table(a=True, b=True)).targets] == ["b", "a"]
