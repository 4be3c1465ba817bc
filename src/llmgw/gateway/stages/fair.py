"""The fair-share stage: a call to a local model whose ready replicas have every slot busy waits
for its tenant's turn (`FairShare`).

The wait is not the stage's own: the stage gives the call a gate (`UpstreamCall.gate`) that the
way out (`reach`) passes just before it chooses a replica. So a guarded call is judged first,
whether the guard stage takes the way out itself or hands the call on: a burst reaches the
judge whole (which sheds what it cannot judge in time), and only calls judged safe, or being
judged in parallel, queue for the model's slots. Built into the chain of models on llmgw's own
engines only; a route's targets are not held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from llmgw.core.types import ApiKey, Team
from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.chain import Next, Stage
from llmgw.gateway.fair import FairShare, Turn
from llmgw.gateway.limits import reserve_estimate
from llmgw.gateway.upstream.table import RoutingTable


def stage(share: FairShare, table: Callable[[], RoutingTable], teams: Mapping[str, Team]) -> Stage:
    """The fair-share stage over `share`, this process's held requests; `table()` is the
    routing table now, whose ready replicas' slots are the model's; `teams` by id, whose
    weights share the slots (a key outside teams weighs 1)."""

    def gate(call: UpstreamCall) -> Awaitable[None] | None:
        name = call.route.model.name

        def capacity() -> int:
            # The replicas ready now: the model may gain or lose one while a call waits.
            route = table().routes.get(name)
            ups = route.upstreams if route is not None else ()
            return 0 if not ups or any(u.slots == 0 for u in ups) else sum(u.slots for u in ups)

        key = call.key
        team = teams.get(key.team_id) if key.team_id is not None else None
        ask = (name, tenant(key), team.weight if team is not None else 1.0,
               reserve_estimate(call.ask.max_tokens, len(call.body)), capacity)
        turn = share.now(*ask)
        if turn is None:
            return _held(share.turn(*ask), call)
        call.exchange.closers.append(turn.ended)
        return None  # a free slot: no frame of its own on the request's way

    def fair(call: UpstreamCall, nxt: Next) -> Awaitable[Reply]:
        call.gate = gate
        return nxt(call)

    return fair


async def _held(waiting: Awaitable[Turn], call: UpstreamCall) -> None:
    turn = await waiting
    call.exchange.closers.append(turn.ended)


def tenant(key: ApiKey) -> str:
    """Whom a request's tokens are shared by: its key's team, or the key outside teams."""
    return f"team:{key.team_id}" if key.team_id else f"key:{key.id}"
