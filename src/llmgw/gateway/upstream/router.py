"""Serving resolution: a route's name to the catalog models one request tries, in order.

The `Router` is this server's: it keeps each target's cooldown and counts fallbacks, retries and
cooldowns for `/metrics`. A route's targets are resolved against the routing table the request
was admitted under, so a target removed from the catalog (or with no ready replica) is skipped.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace

from llmgw.core.clock import Clock
from llmgw.core.errors import ModelNotFound, NoReadyReplica
from llmgw.core.routes import FailOn, RouteSpec, Strategy
from llmgw.gateway.upstream.cooldown import Cooldowns
from llmgw.gateway.upstream.shared_cooldowns import CooldownBus
from llmgw.gateway.upstream.strategies import LeftOut, TargetState, rank, sift
from llmgw.gateway.upstream.table import RoutingTable, Serving


@dataclass(frozen=True)
class Plan:
    """The targets one request of route `spec` may try, in order, each as a catalog route, and
    why each other target is left out (for the request's trace)."""

    spec: RouteSpec
    targets: tuple[Serving, ...]
    router: Router
    left_out: Mapping[str, LeftOut] = field(default_factory=dict)


@dataclass
class Router:
    """Plans requests to routes and remembers how their targets fare, on this server."""

    clock: Clock
    random: Callable[[], float] = random.random
    # How a retry waits for its backoff (tests wait on nothing).
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    cooldowns: Cooldowns = field(default_factory=Cooldowns)
    # Shares the cooldowns this process starts with every process of the install (Redis).
    bus: CooldownBus | None = None
    # Counters read by /metrics: (route, from target, to target, reason), (route, target,
    # reason) and (route, target).
    fallbacks: dict[tuple[str, str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    retries: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    cooldowns_started: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    # Each route's targets as catalog routes, for the table and spec they were made from: made
    # once per refresh, not per request.
    _resolved: dict[str, tuple[RoutingTable, RouteSpec, dict[str, Serving]]] = field(
        default_factory=dict)
    # A priority route's plan while none of its targets has failed: the same for every request
    # until the table, the route or a target's health changes.
    _steady: dict[str, tuple[dict[str, Serving], Plan]] = field(default_factory=dict)

    def targets(self, spec: RouteSpec, table: RoutingTable) -> dict[str, Serving]:
        """The route's targets that are in the catalog, by name, as targets (see `_as_target`)."""
        hit = self._resolved.get(spec.name)
        if hit is not None and hit[0] is table and hit[1] is spec:
            return hit[2]
        found = {t.model: _as_target(r) for t in spec.targets
                 if (r := table.routes.get(t.model)) is not None}
        self._resolved[spec.name] = (table, spec, found)
        return found

    def states(self, spec: RouteSpec, table: RoutingTable) -> list[TargetState]:
        """What the strategy knows of each target now."""
        now = self.clock.monotonic()
        routes = self.targets(spec, table)
        out = []
        for t in spec.targets:
            route = routes.get(t.model)
            ready = route is not None and bool(route.upstreams)
            busy = sum(u.outstanding for u in route.upstreams) if route is not None else 0
            out.append(TargetState(t.model, t.weight, busy, ready,
                                   self.cooldowns.cooling(spec.name, t.model, now),
                                   known=route is not None))
        return out

    def plan(self, spec: RouteSpec, table: RoutingTable) -> Plan:
        """The targets to try for one request, best first (at most `fallback.attempts`).

        When no target is ready and one is merely cold (an on-demand model, a replica starting),
        the plan is that target alone, so the request queues for it as for the model itself;
        NoReadyReplica when every target is cooling down or missing."""
        targets = self.targets(spec, table)
        steady = spec.strategy == Strategy.PRIORITY and self.cooldowns.quiet(spec.name)
        if steady:
            hit = self._steady.get(spec.name)
            if hit is not None and hit[0] is targets:
                return hit[1]
        plan = self._plan(spec, table, targets)
        if steady:
            self._steady[spec.name] = (targets, plan)
        return plan

    def _plan(self, spec: RouteSpec, table: RoutingTable, targets: dict[str, Serving]) -> Plan:
        states = self.states(spec, table)
        sifted = sift(states)
        names = rank(sifted.kept, spec.strategy, self.random)
        if spec.fallback.attempts is not None:
            names = names[: spec.fallback.attempts]
        if names:
            return Plan(spec, tuple(targets[n] for n in names), self, sifted.left_out)
        reasons = sifted.left_out
        # A target that is merely cold may start for this request: it queues as for the model.
        cold = next((n for n, why in reasons.items() if why == LeftOut.NOT_READY), None)
        if cold is not None:
            return Plan(spec, (targets[cold],), self, reasons)
        cooling = [n for n, why in reasons.items() if why == LeftOut.COOLING]
        if cooling:
            now = self.clock.monotonic()
            ends = min(self.cooldowns.get(spec.name, n).until - now for n in cooling)
            raise NoReadyReplica(f"route '{spec.name}': every target is cooling down after "
                                 "failures; try again shortly", code="route_cooling_down",
                                 retry_after_s=max(1, math.ceil(ends)))
        raise NoReadyReplica(f"route '{spec.name}': none of its models is in the catalog")

    def failed(self, spec: RouteSpec, target: str, kind: FailOn) -> None:
        """Count a failure of `target` that the route's fallback rules cover."""
        rule = spec.fallback.cooldown
        if self.cooldowns.failed(spec.name, target, rule, self.clock.monotonic()):
            self.cooldowns_started[(spec.name, target)] += 1
            if self.bus is not None:
                self.bus.publish(spec.name, target, rule.cooldown_s)

    def cooled_elsewhere(self, route: str, target: str, left_s: float) -> None:
        """A cooldown another process started: skipped here too from the next request on."""
        if self.cooldowns.cool(route, target, self.clock.monotonic() + left_s):
            self._steady.pop(route, None)

    def succeeded(self, spec: RouteSpec, target: str) -> None:
        if not self.cooldowns.quiet(spec.name):
            self.cooldowns.succeeded(spec.name, target, self.clock.monotonic())

    def forget(self, route: str) -> None:
        """Drop what is kept of a route that was removed."""
        self.cooldowns.forget_route(route)
        self._resolved.pop(route, None)
        self._steady.pop(route, None)

    def fell_back(self, spec: RouteSpec, source: str, to: str, kind: FailOn) -> None:
        self.fallbacks[(spec.name, source, to, kind.value)] += 1

    def retried(self, spec: RouteSpec, target: str, kind: FailOn) -> None:
        self.retries[(spec.name, target, kind.value)] += 1


def _as_target(route: Serving) -> Serving:
    """A catalog route as a route's target: the request's `model` is the route's name, so a
    remote provider is told the target's own (it would not know the route's). A local engine
    serves one model whatever the request names, so its body goes as it came."""
    if route.upstream_model or not route.model.is_remote:
        return route
    return replace(route, upstream_model=route.model.name)


def resolve(specs: Mapping[str, RouteSpec], name: str) -> RouteSpec:
    """The route named `name`, or the 404 an unknown model gets."""
    spec = specs.get(name)
    if spec is None:
        raise ModelNotFound(f"The model '{name}' does not exist", param="model")
    return spec
