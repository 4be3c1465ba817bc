"""Fair shares of a busy local model: held while every slot is busy, released by tokens served per
tenant and weight; on a fake clock, stepped by the events that free a slot, never by sleeps."""

from __future__ import annotations

import asyncio
from collections import Counter

import orjson
import pytest

from llmgw.core.errors import QueueTimeout
from llmgw.core.types import LocalSource, Model, Profile
from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.fair import FAIR_RETRY_S, FairMetrics, FairShare, Turn
from llmgw.gateway.stages import fair as fair_stage
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.gateway.usage import Tokens
from tests.factories import upstream_call, user_key

COST = 100


class Rig:
    """A fair share on a fake monotonic clock over one model with `slots` slots; each request's
    tenant is noted as it goes."""

    def __init__(self, slots: int, weights: dict[str, float] | None = None,
                 timeout_s: float = 60.0) -> None:
        self.t = 1000.0
        self.slots = slots
        self.share = FairShare(weights or {}, timeout_s, lambda: self.t)
        self.went: list[str] = []
        self.turns: dict[str, list[Turn]] = {}

    def ask(self, tenant: str, cost: int = COST) -> asyncio.Task[Turn]:
        async def request() -> Turn:
            turn = await self.share.turn("m", tenant, self.share.weight(tenant), cost,
                                         lambda: self.slots)
            self.went.append(tenant)
            self.turns.setdefault(tenant, []).append(turn)
            return turn

        return asyncio.create_task(request())

    def end_one(self, tenant: str, used: int = COST) -> None:
        """The oldest running request of `tenant` ends, having used `used` tokens."""
        self.turns[tenant].pop(0).ended(200, Tokens(prompt=used // 2, completion=used - used // 2))

    def held(self) -> dict[str, int]:
        return {tenant: n for (_, tenant), n in self.share.depths().items()}


async def settled() -> None:
    """Let every ready task run until it waits again."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_tenant_alone_is_held_only_while_every_slot_is_busy() -> None:
    rig = Rig(slots=2)
    asked = [rig.ask("a") for _ in range(3)]
    await settled()
    assert rig.went == ["a", "a"] and rig.held() == {"a": 1}  # two slots: the third waits

    rig.end_one("a")
    await settled()
    assert rig.went == ["a", "a", "a"] and rig.held() == {}
    await asyncio.gather(*asked)


async def test_a_model_whose_slots_are_not_known_never_holds() -> None:
    rig = Rig(slots=0)
    await asyncio.gather(*(rig.ask("a") for _ in range(32)))
    assert len(rig.went) == 32


async def test_under_a_flood_another_tenants_request_goes_within_one_slot_turn() -> None:
    rig = Rig(slots=4)
    flood = [rig.ask("batch") for _ in range(16)]
    await settled()
    assert rig.held() == {"batch": 12}

    for n in range(3):  # the interactive tenant asks one at a time, each after the last ended
        single = rig.ask("interactive")
        await settled()
        assert rig.held() == {"batch": 12 - n, "interactive": 1}
        rig.end_one("batch")  # one slot turn: the next to go is the interactive request
        await single
        assert rig.went[-1] == "interactive"
        rig.end_one("interactive")  # its slot goes back to the batch
        await settled()
    assert rig.held() == {"batch": 9}
    while rig.turns.get("batch"):
        rig.end_one("batch")
        await settled()
    await asyncio.gather(*flood)
    assert rig.went.count("batch") == 16


async def test_a_backlog_that_used_less_than_its_estimate_still_lets_a_newcomer_go_next() -> None:
    rig = Rig(slots=2)
    flood = [rig.ask("batch") for _ in range(8)]
    await settled()
    for _ in range(3):
        single = rig.ask("interactive")
        await settled()
        rig.end_one("batch", used=COST // 2)  # estimated at COST, used half: corrected down
        await single
        assert rig.went[-1] == "interactive"
        rig.end_one("interactive")
        await settled()
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


async def test_weights_share_the_tokens_two_to_one() -> None:
    rig = Rig(slots=1, weights={"gold": 2.0})
    asked = [rig.ask(t) for _ in range(40) for t in ("gold", "bronze")]
    await settled()
    for _ in range(30):  # each ended request gives its slot to the next
        rig.end_one(rig.went[-1])
        await settled()
    counts = Counter(rig.went[1:31])
    assert abs(counts["gold"] - 20) <= 1 and counts["gold"] + counts["bronze"] == 30  # 2:1, to a request
    for task in asked:
        task.cancel()
    await asyncio.gather(*asked, return_exceptions=True)


async def test_what_a_request_used_corrects_its_tenants_share_when_it_ends() -> None:
    rig = Rig(slots=1)
    rig.ask("a")
    await settled()
    later = [rig.ask("a"), rig.ask("b"), rig.ask("b")]
    await settled()
    rig.end_one("a", used=10 * COST)  # estimated at COST, used ten times more
    for _ in range(3):
        await settled()
        rig.end_one(rig.went[-1])
    await asyncio.gather(*later)
    assert rig.went == ["a", "b", "b", "a"]  # b is served until it has caught up with a


async def test_a_request_that_waits_its_whole_budget_gets_a_503_with_a_retry_after() -> None:
    rig = Rig(slots=1, timeout_s=30.0)
    rig.ask("a")
    waiting = rig.ask("b")
    await settled()
    rig.t += 31
    rig.share.expire()

    with pytest.raises(QueueTimeout) as caught:
        await waiting
    assert caught.value.status == 503 and caught.value.code == "queue_timeout"
    assert caught.value.retry_after_s == FAIR_RETRY_S
    assert "every slot of its replicas stayed busy" in caught.value.message
    assert rig.held() == {}


async def test_a_slot_freed_after_a_wait_ran_out_goes_to_the_next_not_the_late_one() -> None:
    rig = Rig(slots=1, timeout_s=30.0)
    rig.ask("a")
    late = rig.ask("b")
    await settled()
    rig.t += 31
    fresh = rig.ask("c")
    await settled()
    rig.end_one("a")
    with pytest.raises(QueueTimeout):
        await late
    await fresh
    assert rig.went == ["a", "c"]


async def test_a_cancelled_held_request_leaves_the_queue_and_its_turn_goes_to_the_next() -> None:
    rig = Rig(slots=1)
    rig.ask("a")
    gone, next_one = rig.ask("b"), rig.ask("c")
    await settled()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert rig.held() == {"c": 1}

    rig.end_one("a")
    await next_one
    assert rig.went == ["a", "c"]


async def test_the_held_requests_per_tenant_are_in_the_metrics() -> None:
    rig = Rig(slots=1)
    asked = [rig.ask("team:t1"), rig.ask("team:t1"), rig.ask("key:k1")]
    await settled()
    (family,) = FairMetrics(rig.share).collect()
    assert family.name == "llmgw_fair_queue_depth"
    assert {(s.labels["model"], s.labels["tenant"]): s.value for s in family.samples} == {
        ("m", "team:t1"): 1, ("m", "key:k1"): 1}
    for task in asked:
        task.cancel()
    await asyncio.gather(*asked, return_exceptions=True)


# The stage, over calls as the service makes them.

LOCAL = Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})


def one_slot() -> tuple[Serving, RoutingTable]:
    route = Serving(LOCAL, (Upstream("r1", "http://127.0.0.1:9/v1", slots=1),))
    return route, RoutingTable({"m": route})


async def test_the_stage_gives_the_slot_back_however_the_call_ends() -> None:
    route, table = one_slot()
    share = FairShare({}, 60.0, lambda: 0.0)
    fair = fair_stage.stage(share, lambda: table)
    sent: list[UpstreamCall] = []

    async def failing(call: UpstreamCall) -> Reply:
        sent.append(call)
        raise RuntimeError("the upstream broke")

    async def answering(call: UpstreamCall) -> Reply:
        sent.append(call)
        return Reply(200, b"{}")

    first = upstream_call(route, BODY)
    with pytest.raises(RuntimeError):
        await fair(first, failing)
    second = upstream_call(route, BODY, key=user_key()[1])
    held = asyncio.create_task(fair(second, answering))
    await settled()
    assert sent == [first] and share.depths() == {("m", fair_stage.tenant(second.key)): 1}

    first.exchange.end(502, Tokens())  # the service ends the failed call: its slot goes on
    assert (await held).status == 200 and sent == [first, second]
    second.exchange.end(200, Tokens(5, 3))
    third = upstream_call(route, BODY)
    assert (await fair(third, answering)).status == 200  # not held: the slot is free again


def test_a_team_is_one_tenant_and_a_key_outside_teams_is_its_own() -> None:
    one, two = (user_key()[1].model_copy(update={"team": "t", "team_id": "team-1"})
                for _ in range(2))
    alone = user_key()[1]
    assert fair_stage.tenant(one) == fair_stage.tenant(two) == "team:team-1"
    assert fair_stage.tenant(alone) == f"key:{alone.id}"
    share = FairShare({"t": 3.0}, 60.0, lambda: 0.0)
    assert share.weight(one.team) == 3.0 and share.weight(alone.team) == 1.0


async def test_a_replica_added_sends_the_held_requests_its_slots_make_room_for() -> None:
    rig = Rig(slots=1)
    asked = [rig.ask("a") for _ in range(4)]
    await settled()
    assert rig.held() == {"a": 3}
    rig.slots = 3  # a new routing table: two more slots
    rig.share.refreshed()
    await settled()
    assert rig.held() == {"a": 1} and len(rig.went) == 3
    for task in asked:
        task.cancel()
    await asyncio.gather(*asked, return_exceptions=True)


async def test_each_worker_sends_its_share_of_the_slots() -> None:
    share = FairShare({}, 60.0, lambda: 0.0, processes=2)
    turns = [share.now("m", "a", 1.0, COST, lambda: 4) for _ in range(3)]
    assert [t is not None for t in turns] == [True, True, False]  # 2 of the 4: the other worker's 2
    odd = [share.now("n", "a", 1.0, COST, lambda: 3) for _ in range(3)]
    assert [t is not None for t in odd] == [True, True, False]  # 3 slots: 2 each, none left idle
