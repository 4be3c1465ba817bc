"""What resolving a route costs llmgw in CPU per request, with the network and the event loop
taken out.

A request to a route does, beside what a request to a plain model does: look the name up among
the routes, order the targets (`Router.plan`: each target's health and load, the strategy) and
write the upstream request for the first target (`outbound`: the body with the provider's model
name, where a plain remote model's goes as it came). This times both paths on `bench/run.sh`'s
chat request, for a two-target route of each strategy, and prints microseconds per request
(best of 5 runs) and the difference to the plain model.

    .venv/bin/python bench/route_cost.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from llmgw.core.clock import SystemClock
from llmgw.core.routes import RouteSpec, Strategy, Target
from llmgw.core.types import ApiKey, KeyScope, Model, RemoteSource
from llmgw.gateway.call import UpstreamCall
from llmgw.gateway.outbound import outbound
from llmgw.gateway.service import WIRES
from llmgw.gateway.upstream.router import Router
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.gateway.wire.dialect import Api

KEY = ApiKey(id="key-bench", name="bench", prefix="sk-llmgw-bench", last4="abcd", hash="x",
             scope=KeyScope.USER)


def body(model: str) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}],
                         "stream": False})


def per_request_us(work: Callable[[], object], seconds: float) -> float:
    """Microseconds per call of `work`: the best of 5 runs of about `seconds / 5` each."""
    best = float("inf")
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 5:
            for _ in range(200):
                work()
            n += 200
        best = min(best, elapsed / n * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    wire = WIRES[Api.CHAT]
    models = {n: Model(name=n, source=RemoteSource(base_url="http://127.0.0.1:9/v1"))
              for n in ("fake-json", "fake-json-b")}
    table = RoutingTable({n: Serving(m, (Upstream(f"remote:{n}", "http://127.0.0.1:9/v1"),))
                          for n, m in models.items()})

    def plain() -> object:
        raw = body("fake-json")
        payload = orjson.loads(raw)
        ask = wire.read(payload)
        route = table.routes.get(ask.model)
        assert route is not None
        call = UpstreamCall(route, raw, payload, Api.CHAT, wire, ask, "", KEY, 0.0)
        return outbound(call)

    rows = [("plain model", per_request_us(plain, args.seconds))]
    for strategy in Strategy:
        spec = RouteSpec(name="route-json", strategy=strategy,
                         targets=[Target(model="fake-json"), Target(model="fake-json-b")])
        router = Router(SystemClock())

        def routed(specs: dict[str, RouteSpec] = {"route-json": spec},  # noqa: B006 - read only
                   router: Router = router) -> object:
            raw = body("route-json")
            payload = orjson.loads(raw)
            ask = wire.read(payload)
            route = table.routes.get(ask.model)
            assert route is None
            plan = router.plan(specs[ask.model], table)
            call = UpstreamCall(plan.targets[0], raw, payload, Api.CHAT, wire, ask, "", KEY, 0.0,
                                plan)
            return outbound(call)

        rows.append((f"route, {strategy.value}", per_request_us(routed, args.seconds)))
    base = rows[0][1]
    print("| path | µs/request | vs plain model |")  # noqa: T201
    print("|---|---:|---:|")  # noqa: T201
    for name, us in rows:
        print(f"| {name} | {us:.2f} | {us - base:+.2f} |")  # noqa: T201


if __name__ == "__main__":
    main()
