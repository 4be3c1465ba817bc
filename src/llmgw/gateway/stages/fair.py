"""The fair-share stage: a call to a local model whose ready replicas have every slot busy waits
for its tenant's turn (`FairShare`). After the cold-start queue (a model with no replica has no
slots to share) and before the guard, which takes the way out itself where a policy covers the
call. Built into the chain of models on llmgw's own engines only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from llmgw.core.types import ApiKey
from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.chain import Next, Stage
from llmgw.gateway.fair import FairShare, Turn
from llmgw.gateway.limits import reserve_estimate
from llmgw.gateway.upstream.table import RoutingTable


def stage(share: FairShare, table: Callable[[], RoutingTable]) -> Stage:
    """The fair-share stage over `share`, this process's held requests; `table()` is the
    routing table now, whose ready replicas' slots are the model's."""

    def fair(call: UpstreamCall, nxt: Next) -> Awaitable[Reply]:
        name = call.route.model.name
        key = call.key

        def capacity() -> int:
            # The replicas ready now: the model may gain or lose one while a call waits.
            route = table().routes.get(name)
            ups = route.upstreams if route is not None else ()
            return 0 if not ups or any(u.slots == 0 for u in ups) else sum(u.slots for u in ups)

        ask = (name, tenant(key), share.weight(key.team),
               reserve_estimate(call.ask.max_tokens, len(call.body)), capacity)
        turn = share.now(*ask)
        if turn is None:
            return _held(share.turn(*ask), call, nxt)
        call.exchange.closers.append(turn.ended)
        return nxt(call)  # a free slot: no frame of its own on the request's way

    return fair


async def _held(waiting: Awaitable[Turn], call: UpstreamCall, nxt: Next) -> Reply:
    turn = await waiting
    call.exchange.closers.append(turn.ended)
    return await nxt(call)


def tenant(key: ApiKey) -> str:
    """Whom a request's tokens are shared by: its key's team, or the key outside teams."""
    return f"team:{key.team_id}" if key.team_id else f"key:{key.id}"
