"""Which guard policies cover a call: its model's, or on a route (whichever target answers)
what covers the route or any of its targets. Read by the guard stage, which judges under them,
and the cache stage, whose kept answers are the ones they passed."""

from __future__ import annotations

from llmgw.core.guard import Direction, Policy
from llmgw.gateway.call import UpstreamCall
from llmgw.gateway.upstream.router import Plan
from llmgw.guard.enforcement import Guard


def covering(guard: Guard, call: UpstreamCall) -> tuple[list[Policy], list[Policy]]:
    """The input and output policies covering the call."""
    if call.plan is None:
        name, key = call.route.model.name, call.key.name
        return guard.policies(name, key, Direction.INPUT), guard.policies(name, key, Direction.OUTPUT)
    return route_policies(guard, call.plan, call.key.name)


def policies(guard: Guard | None, call: UpstreamCall) -> tuple[list[Policy], list[Policy]]:
    """`covering`, none for a judge's own call or without a guard."""
    if guard is None or call.route.model.guard:
        return [], []
    return covering(guard, call)


def route_policies(guard: Guard, plan: Plan, key_name: str) -> tuple[list[Policy], list[Policy]]:
    """The input and output policies covering a route's name or any of its targets, once each."""
    names = [plan.spec.name, *(t.model.name for t in plan.targets)]
    found: list[list[Policy]] = []
    for direction in (Direction.INPUT, Direction.OUTPUT):
        seen: dict[str, Policy] = {}
        for n in names:
            for p in guard.policies(n, key_name, direction):
                seen.setdefault(p.name, p)
        found.append(list(seen.values()))
    return found[0], found[1]
