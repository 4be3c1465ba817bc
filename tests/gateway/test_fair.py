"""Fair shares of a busy local model: held while every slot is busy, released by tokens served per
tenant and weight; on a fake clock, stepped by the events that free a slot, never by sleeps."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from typing import Any, cast

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from llmgw.api.errors import error_response
from llmgw.core.errors import QueueTimeout, UpstreamError
from llmgw.core.guard import Direction, Policy
from llmgw.core.types import ApiKey, LocalSource, Model, Profile, Team
from llmgw.gateway.call import Reply, UpstreamCall
from llmgw.gateway.chain import Next
from llmgw.gateway.fair import FAIR_RETRY_S, FairShare, Turn
from llmgw.gateway.metrics import Metrics, merged
from llmgw.gateway.relay import outbound, send
from llmgw.gateway.stages import fair as fair_stage
from llmgw.gateway.stages.guard import Judged, forward_guarded
from llmgw.gateway.transport import Connection, Transport
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.gateway.usage import Tokens
from llmgw.guard.enforcement import Guard, RequestInfo
from tests.factories import upstream_call, user_key

COST = 100


class Rig:
    """A fair share on a fake monotonic clock over one model with `slots` slots; each request's
    tenant is noted as it goes."""

    def __init__(self, slots: int, weights: dict[str, float] | None = None,
                 timeout_s: float = 60.0, spare: int = 0) -> None:
        self.t = 1000.0
        self.slots = slots
        self.weights = weights or {}
        self.share = FairShare(timeout_s, lambda: self.t, spare=spare)
        self.went: list[str] = []
        self.turns: dict[str, list[Turn]] = {}

    def ask(self, tenant: str, cost: int = COST) -> asyncio.Task[Turn]:
        async def request() -> Turn:
            turn = await self.share.turn("m", tenant, self.weights.get(tenant, 1.0), cost,
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


async def test_a_spare_slot_lets_a_newcomer_start_at_once_while_a_backlog_waits() -> None:
    rig = Rig(slots=4, spare=1)
    flood = [rig.ask("batch") for _ in range(8)]
    await settled()
    assert rig.went == ["batch"] * 3 and rig.held() == {"batch": 5}  # the fourth slot kept
    first = rig.ask("interactive")
    await settled()
    assert rig.went[-1] == "interactive"  # at once, without waiting for a slot turn
    second = rig.ask("interactive")  # the spare slot is its: the next waits like any other
    await settled()
    assert rig.held() == {"batch": 5, "interactive": 1}
    rig.end_one("interactive")
    await second
    assert rig.went[-1] == "interactive" and rig.held() == {"batch": 5}
    await first
    rig.end_one("batch")  # the slot it freed is the one kept spare while the newcomer runs
    await settled()
    assert rig.held() == {"batch": 5}
    rig.end_one("interactive")  # two free: the backlog's next takes one, one stays spare
    await settled()
    assert rig.went[-1] == "batch" and rig.held() == {"batch": 4}
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


async def test_a_share_of_one_slot_keeps_none_spare() -> None:
    rig = Rig(slots=1, spare=1)
    asked = [rig.ask("a"), rig.ask("a")]
    await settled()
    assert rig.went == ["a"] and rig.held() == {"a": 1}
    rig.end_one("a")
    await asyncio.gather(*asked)
    assert rig.went == ["a", "a"]


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


async def test_a_slot_freed_before_a_cancelled_request_has_left_goes_to_the_next() -> None:
    rig = Rig(slots=1)
    rig.ask("a")
    gone, next_one = rig.ask("b"), rig.ask("c")
    await settled()
    gone.cancel()  # its client left; it takes itself out of the queue only when it next runs
    rig.end_one("a")  # meanwhile a slot frees (clients that leave together: a batch stopped)
    await next_one
    assert rig.went == ["a", "c"]
    with pytest.raises(asyncio.CancelledError):
        await gone
    rig.end_one("c")  # nothing was counted for the one that left: the slot is free again
    await rig.ask("d")
    assert rig.went == ["a", "c", "d"] and rig.held() == {}


async def test_the_held_requests_per_tenant_are_in_the_metrics_summed_over_the_workers() -> None:
    rig = Rig(slots=1)
    asked = [rig.ask("team:t1"), rig.ask("team:t1"), rig.ask("key:k1")]
    await settled()
    table = RoutingTable({})
    mine = Metrics(lambda: table, held=rig.share.depths)
    other = Metrics(lambda: table, held=lambda: {("m", "team:t1"): 2})

    def depths(metrics: Metrics) -> dict[tuple[str, str], float]:
        [family] = [f for f in metrics.collect() if f.name == "llmgw_fair_queue_depth"]
        return {(s.labels["model"], s.labels["tenant"]): s.value for s in family.samples}

    assert depths(mine) == {("m", "team:t1"): 1, ("m", "key:k1"): 1}
    both = merged(mine, [other.state()])
    assert depths(both) == {("m", "team:t1"): 3, ("m", "key:k1"): 1}
    assert both.held() == {("m", "key:k1"): 1, ("m", "team:t1"): 3}
    for task in asked:
        task.cancel()
    await asyncio.gather(*asked, return_exceptions=True)


# The stage and the way out, over calls as the service makes them.

LOCAL = Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])
POLICY = Policy(name="in", judges=["j"])
INFO = RequestInfo(model="m", key_name="k", key_label="sk-k…", request_id="req-1")


def body(text: str = "hi") -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}],
                         "max_tokens": 8})


def one_slot() -> tuple[Serving, RoutingTable]:
    route = Serving(LOCAL, (Upstream("r1", "http://127.0.0.1:9/v1", slots=1),))
    return route, RoutingTable({"m": route})


class Answer:
    """An upstream's whole 200 answer, as the way out reads it."""

    status = 200

    async def whole(self) -> bytes:
        return b'{"choices": []}'

    def release(self) -> None:
        pass


class Engine:
    """A transport whose engine answers the requests sent to it one at a time, when told; the
    prompt of each is noted as it is sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._answers: list[asyncio.Future[None]] = []
        self.fail = False

    async def send(self, up: Upstream, path: str, raw: bytes, tries: int) -> Connection:
        self.sent.append(orjson.loads(raw)["messages"][0]["content"])
        if self.fail:
            raise UpstreamError("the upstream broke")
        answered = asyncio.get_running_loop().create_future()
        self._answers.append(answered)
        await answered
        return cast(Connection, Answer())

    def answer_next(self) -> None:
        self._answers.pop(0).set_result(None)


class Judge:
    """A guard whose judges find every prompt safe; the prompts it was asked about, in order."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def check(self, policies: list[Policy], direction: Direction, turns: list[Any],
                    info: RequestInfo) -> bool:
        if policies:
            self.asked.append(turns[-1].content)
        return True


class WayOut:
    """One model of one slot with the fair-share stage in front of the way out: plain (the
    relay's `send`) or guarded (the guard stage's `forward_guarded`, which reaches the upstream
    itself); each call is ended as the service ends it, which gives its slot back."""

    def __init__(self, teams: dict[str, Team] | None = None) -> None:
        self.route, table = one_slot()
        self.t = 0.0  # the share's monotonic clock
        self.share = FairShare(60.0, lambda: self.t)
        self.fair = fair_stage.stage(self.share, lambda: table, teams or {})
        self.engine = Engine()
        self.judge = Judge()
        transport = cast(Transport, self.engine)

        def plain(call: UpstreamCall) -> Awaitable[Reply]:
            return send(transport, call, outbound(call), call.exchange)

        def guarded(call: UpstreamCall) -> Awaitable[Reply]:
            return forward_guarded(transport, call, outbound(call), call.exchange,
                                   Judged(cast(Guard, self.judge), INFO, [POLICY], []))

        self.plain, self.guarded = plain, guarded

    def ask(self, text: str, nxt: Next | None = None, key: ApiKey | None = None,
            ) -> asyncio.Task[Reply]:
        call = upstream_call(self.route, body(text), key=key or user_key()[1])

        async def run() -> Reply:
            try:
                reply = await self.fair(call, nxt or self.plain)
            except BaseException:
                call.exchange.end(502, Tokens())
                raise
            call.exchange.end(200, Tokens(5, 3))
            return reply

        return asyncio.create_task(run())


async def test_a_guarded_burst_is_judged_whole_before_it_waits_for_the_busy_slot() -> None:
    way = WayOut()
    busy = way.ask("busy")
    await settled()
    burst = [way.ask(f"burst {i}", way.guarded) for i in range(4)]
    await settled()
    # Every prompt of the burst went to the judge while the one slot was busy (the judge sheds
    # what it cannot judge in time); only then does each wait for the slot.
    assert way.judge.asked == [f"burst {i}" for i in range(4)]
    assert sum(way.share.depths().values()) == 4 and way.engine.sent == ["busy"]
    for _ in range(5):
        way.engine.answer_next()
        await settled()
    assert [(await t).status for t in (busy, *burst)] == [200] * 5
    assert way.engine.sent == ["busy", *(f"burst {i}" for i in range(4))]


async def test_a_call_held_past_its_budget_is_answered_503_with_a_retry_after_and_never_sent(
) -> None:
    way = WayOut()
    busy = way.ask("busy")
    await settled()
    late = way.ask("late")
    await settled()
    way.t += 61
    way.share.expire()
    with pytest.raises(QueueTimeout) as caught:
        await late
    resp = error_response(make_mocked_request("POST", "/v1/chat/completions"), caught.value)
    assert resp.status == 503 and resp.headers["Retry-After"] == str(FAIR_RETRY_S)
    assert resp.body is not None and b'"code":"queue_timeout"' in bytes(cast(bytes, resp.body))
    way.engine.answer_next()
    assert (await busy).status == 200 and way.engine.sent == ["busy"]  # the late one never went


async def test_the_stage_gives_the_slot_back_however_the_call_ends() -> None:
    way = WayOut()
    way.engine.fail = True
    with pytest.raises(UpstreamError):
        await way.ask("first")  # failed: ended as a 502, its slot goes on
    way.engine.fail = False
    second = way.ask("second")
    await settled()
    third = way.ask("third")
    await settled()
    assert way.engine.sent == ["first", "second"] and sum(way.share.depths().values()) == 1
    way.engine.answer_next()
    assert (await second).status == 200
    await settled()
    way.engine.answer_next()
    assert (await third).status == 200 and way.engine.sent == ["first", "second", "third"]
    assert way.share.depths() == {}


async def test_a_teams_stored_weight_is_its_share_and_a_key_outside_teams_weighs_one() -> None:
    gold = Team(name="gold", weight=2.0)
    way = WayOut({gold.id: gold})
    member = user_key()[1].model_copy(update={"team": "gold", "team_id": gold.id})
    alone = user_key()[1]
    busy = way.ask("busy")
    await settled()
    asked = [way.ask(name, key=key) for _ in range(8)
             for name, key in (("gold", member), ("alone", alone))]
    await settled()
    assert way.share.depths() == {("m", f"team:{gold.id}"): 8, ("m", f"key:{alone.id}"): 8}
    for _ in range(10):
        way.engine.answer_next()
        await settled()
    # Requests cost alike: after the first of each, the team goes twice for each of the key's.
    assert Counter(way.engine.sent[3:9]) == {"gold": 4, "alone": 2}
    for task in (busy, *asked):
        task.cancel()
    await asyncio.gather(busy, *asked, return_exceptions=True)


def test_a_team_is_one_tenant_and_a_key_outside_teams_is_its_own() -> None:
    one, two = (user_key()[1].model_copy(update={"team": "t", "team_id": "team-1"})
                for _ in range(2))
    alone = user_key()[1]
    assert fair_stage.tenant(one) == fair_stage.tenant(two) == "team:team-1"
    assert fair_stage.tenant(alone) == f"key:{alone.id}"


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
    share = FairShare(60.0, lambda: 0.0, processes=2)
    turns = [share.now("m", "a", 1.0, COST, lambda: 4) for _ in range(3)]
    assert [t is not None for t in turns] == [True, True, False]  # 2 of the 4: the other worker's 2
    odd = [share.now("n", "a", 1.0, COST, lambda: 3) for _ in range(3)]
    assert [t is not None for t in odd] == [True, True, False]  # 3 slots: 2 each, none left idle
