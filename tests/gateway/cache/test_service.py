"""The response cache through llmgw's real data plane and the official SDKs: the same request
twice is one upstream call, in every dialect and streamed or not; tenants never share answers;
what the output guard blocked is never kept; a kept answer still needs the input guard and the
right to call its model; the client's `Cache-Control` is heard; a purge empties it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import openai
import pytest

from llmgw.core.cache import CacheMode, CacheSpec
from llmgw.core.guard import OnFailure, Policy, VerdictRecord
from llmgw.core.judges import DEFAULT_JUDGE, KNOWN
from llmgw.core.settings import CacheSettings
from llmgw.core.types import Limits, ProviderApi
from llmgw.gateway.cache.embed import Embedder
from llmgw.gateway.cache.memory import MemoryCache
from llmgw.gateway.cache.service import Probe, ResponseCache, admits
from llmgw.gateway.cache.store import InMemory
from llmgw.gateway.call import Exchange
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.gateway.usage import UsageTap
from llmgw.guard.enforcement import Guard, GuardView
from llmgw.guard.judge_client import JudgeClient, JudgeTarget
from llmgw.store.store import Store
from tests.factories import remote_model, user_key
from tests.fakes.judge import FakeJudge
from tests.fakes.provider import ANSWER, USAGE, FakeProvider, GatewayRig

ASK: Any = [{"role": "user", "content": "How wide is the sea?"}]


def exact_cache(**over: Any) -> ResponseCache:
    """An exact cache for every model, in this process's memory."""
    settings = CacheSettings(mode=CacheMode.EXACT, **over)
    return ResponseCache(settings, InMemory(MemoryCache(settings.max_entries, 2**20,
                                                        time.monotonic)))


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    p = await FakeProvider().start()
    yield p
    await p.close()


async def rig(provider: FakeProvider, store: Store, **over: Any) -> GatewayRig:
    """llmgw in front of `provider` as remote model `m` (chat completions only, so Messages and
    Responses are translated), with an exact cache unless `over` says otherwise."""
    over.setdefault("cache", exact_cache())
    over.setdefault("model", remote_model("m", api=ProviderApi.OPENAI, api_key_env=None))
    return await GatewayRig(provider, store, **over).start()


async def as_the_other(r: GatewayRig, other: str) -> Any:
    """The rig's key asks, then `other` asks the same: the other's raw response."""
    async with r.openai() as client:
        await ask(r, client)
    async with openai.AsyncOpenAI(base_url=r.url + "/v1", api_key=other, max_retries=0) as client:
        return await client.chat.completions.with_raw_response.create(
            model="m", messages=ASK, temperature=0)


async def ask(r: GatewayRig, client: openai.AsyncOpenAI, times: int = 1) -> None:
    """The same deterministic question `times` times, each answer kept before the next asks."""
    for _ in range(times):
        await client.chat.completions.create(model="m", messages=ASK, temperature=0)
        await settled(r)


async def settled(r: GatewayRig) -> None:
    """Wait until the answers on their way into the cache are in (they go off the client's wait)."""
    assert r.cache is not None
    await r.cache.settled()


async def test_the_same_request_twice_is_one_upstream_call(provider: FakeProvider, store: Store) -> None:
    r = await rig(provider, store)
    async with r.openai() as client:
        first = await client.chat.completions.with_raw_response.create(
            model="m", messages=ASK, temperature=0)
        await settled(r)
        second = await client.chat.completions.with_raw_response.create(
            model="m", messages=ASK, temperature=0, user="someone-else")  # `user` is not the ask
    await r.close()
    assert len(provider.requests) == 1
    assert (first.headers["x-llmgw-cache"], second.headers["x-llmgw-cache"]) == ("miss", "hit")
    answer = second.parse()
    assert answer.choices[0].message.content == ANSWER
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.total_tokens == USAGE["total_tokens"]


async def test_a_request_that_may_differ_each_time_is_not_cached(provider: FakeProvider,
                                                                 store: Store) -> None:
    r = await rig(provider, store)
    async with r.openai() as client:
        for _ in range(2):
            resp = await client.chat.completions.with_raw_response.create(
                model="m", messages=ASK, temperature=0.7)
            await settled(r)
            assert "x-llmgw-cache" not in resp.headers
        # … unless the client asks for it.
        for header in ("miss", "hit"):
            resp = await client.chat.completions.with_raw_response.create(
                model="m", messages=ASK, temperature=0.7, extra_headers={"X-Llmgw-Cache": "on"})
            await settled(r)
            assert resp.headers["x-llmgw-cache"] == header
    await r.close()
    assert len(provider.requests) == 3


async def test_another_field_that_changes_the_answer_is_another_entry(provider: FakeProvider,
                                                                       store: Store) -> None:
    r = await rig(provider, store)
    async with r.openai() as client:
        for max_tokens in (16, 17, 16):
            await client.chat.completions.create(model="m", messages=ASK, seed=1,
                                                 max_tokens=max_tokens)
            await settled(r)
    await r.close()
    assert len(provider.requests) == 2


async def test_another_tenant_misses(provider: FakeProvider, store: Store) -> None:
    other, other_key = user_key(name="other")
    r = await rig(provider, store, others=[(other, other_key)])
    resp = await as_the_other(r, other)
    await r.close()
    assert resp.headers["x-llmgw-cache"] == "miss" and len(provider.requests) == 2


async def test_a_model_that_shares_its_answers_serves_every_tenant(provider: FakeProvider,
                                                                   store: Store) -> None:
    other, other_key = user_key(name="other")
    model = remote_model("m", api=ProviderApi.OPENAI, api_key_env=None).model_copy(
        update={"cache": CacheSpec(shared=True)})
    r = await rig(provider, store, model=model, others=[(other, other_key)])
    resp = await as_the_other(r, other)
    await r.close()
    assert resp.headers["x-llmgw-cache"] == "hit" and len(provider.requests) == 1


async def test_a_key_that_may_not_call_the_model_is_not_served_its_answer(
        provider: FakeProvider, store: Store) -> None:
    other, other_key = user_key(name="other", models=["nothing-*"])
    model = remote_model("m", api=ProviderApi.OPENAI, api_key_env=None).model_copy(
        update={"cache": CacheSpec(shared=True)})
    r = await rig(provider, store, model=model, others=[(other, other_key)])
    with pytest.raises(openai.NotFoundError):
        await as_the_other(r, other)
    await r.close()


async def test_a_model_with_the_cache_off_is_never_cached(provider: FakeProvider,
                                                          store: Store) -> None:
    model = remote_model("m", api=ProviderApi.OPENAI, api_key_env=None).model_copy(
        update={"cache": CacheSpec(mode=CacheMode.OFF)})
    r = await rig(provider, store, model=model)
    async with r.openai() as client:
        await ask(r, client, times=2)
    await r.close()
    assert len(provider.requests) == 2


async def test_a_model_may_turn_the_cache_on_for_itself(provider: FakeProvider, store: Store) -> None:
    model = remote_model("m", api=ProviderApi.OPENAI, api_key_env=None).model_copy(
        update={"cache": CacheSpec(mode=CacheMode.EXACT)})
    r = await rig(provider, store, model=model, cache=ResponseCache(
        CacheSettings(), InMemory(MemoryCache(10, 2**20, time.monotonic))))
    async with r.openai() as client:
        await ask(r, client, times=2)
    await r.close()
    assert len(provider.requests) == 1


async def test_cache_control_no_cache_asks_the_upstream_and_no_store_keeps_nothing(
        provider: FakeProvider, store: Store) -> None:
    r = await rig(provider, store)
    async with r.openai() as client:
        async def ask(cache_control: str | None = None) -> str:
            headers = {"Cache-Control": cache_control} if cache_control else {}
            resp = await client.chat.completions.with_raw_response.create(
                model="m", messages=ASK, temperature=0, extra_headers=headers)
            await settled(r)
            return resp.headers["x-llmgw-cache"]

        assert await ask("no-store") == "miss"
        assert await ask() == "miss"  # the first was not kept
        assert await ask("no-cache") == "miss"  # kept, but not looked up
        assert await ask() == "hit"
    await r.close()
    assert len(provider.requests) == 3


@pytest.mark.parametrize("stream_first", [False, True])
async def test_a_hit_is_replayed_whole_and_streamed_in_each_dialect(
        provider: FakeProvider, store: Store, stream_first: bool) -> None:
    r = await rig(provider, store)
    chat_ask: Any = {"model": "m", "messages": ASK, "temperature": 0}
    async with r.openai() as client:
        # The first answer is kept, whichever way it came; then every way is served from it.
        await client.chat.completions.create(**chat_ask, stream=stream_first)
        await settled(r)
        whole = await client.chat.completions.create(**chat_ask)
        assert whole.choices[0].message.content == ANSWER
        stream = await client.chat.completions.create(**chat_ask, stream=True,
                                                      stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert len(provider.requests) == 1

    # (This SDK's create takes no `temperature`: it goes as the body's own field.)
    messages_ask: Any = {"model": "m", "max_tokens": 64, "messages": ASK,
                         "extra_body": {"temperature": 0}}
    async with r.anthropic() as claude:
        await claude.messages.create(**messages_ask)  # its own entry: another dialect's request
        await settled(r)
        whole_message = await claude.messages.create(**messages_ask)
        assert whole_message.content[0].type == "text" and whole_message.content[0].text == ANSWER
        async with claude.messages.stream(**messages_ask) as events:
            final = await events.get_final_message()
        assert final.content[0].type == "text" and final.content[0].text == ANSWER
        assert final.stop_reason == "end_turn"
    assert len(provider.requests) == 2

    async with r.openai() as client:
        await client.responses.create(model="m", input="How wide is the sea?", temperature=0)
        await settled(r)
        response = await client.responses.create(model="m", input="How wide is the sea?",
                                                 temperature=0)
        assert response.output_text == ANSWER
        async with client.responses.stream(model="m", input="How wide is the sea?",
                                           temperature=0) as events:
            final_response = await events.get_final_response()
        assert final_response.output_text == ANSWER and final_response.status == "completed"
    await r.close()
    assert len(provider.requests) == 3


async def test_a_hit_counts_against_requests_per_minute_but_spends_no_tokens(
        provider: FakeProvider, store: Store) -> None:
    r = await rig(provider, store, limits=Limits(rpm=2))
    async with r.openai() as client:
        await ask(r, client, times=2)
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="m", messages=ASK, temperature=0)
    assert r.meter is not None
    await r.meter.flush()
    await r.close()
    (row,) = store.usage.usage()
    assert (row.requests, row.cache_hits, row.saved_tokens) == (2, 1, USAGE["total_tokens"])
    # Only the miss's tokens are spent: the hit saved its own.
    assert row.prompt_tokens + row.completion_tokens == USAGE["total_tokens"]


async def test_charged_hits_spend_their_tokens(provider: FakeProvider, store: Store) -> None:
    r = await rig(provider, store, cache=exact_cache(charge_hits=True))
    async with r.openai() as client:
        await ask(r, client, times=2)
    assert r.meter is not None
    await r.meter.flush()
    await r.close()
    (row,) = store.usage.usage()
    assert row.cache_hits == 1 and row.prompt_tokens + row.completion_tokens == 2 * 14


async def test_hits_and_misses_are_counted_in_the_metrics(provider: FakeProvider,
                                                          store: Store) -> None:
    holder: list[GatewayRig] = []
    metrics = Metrics(lambda: holder[0].refresher.current.table)  # type: ignore[union-attr]
    r = await rig(provider, store, metrics=metrics)
    holder.append(r)
    async with r.openai() as client:
        for _ in range(3):
            await client.chat.completions.create(model="m", messages=ASK, temperature=0)
            await settled(r)
    await r.close()
    text = metrics.render().decode()
    assert 'llmgw_cache_lookups_total{model="m",result="hit"} 2.0' in text
    assert 'llmgw_cache_lookups_total{model="m",result="miss"} 1.0' in text
    assert 'llmgw_cache_saved_tokens_total{model="m"} 28.0' in text


async def test_a_purge_empties_it(provider: FakeProvider, store: Store) -> None:
    r = await rig(provider, store)
    assert r.cache is not None
    async with r.openai() as client:
        await ask(r, client)
        assert await r.cache.store.purge(None) == 1
        resp = await client.chat.completions.with_raw_response.create(
            model="m", messages=ASK, temperature=0)
    await r.close()
    assert resp.headers["x-llmgw-cache"] == "miss" and len(provider.requests) == 2


async def test_a_stream_its_upstream_broke_after_its_last_token_is_a_failure_never_kept(
        store: Store) -> None:
    # Every event but `[DONE]`: the last token, the finish and the usage came, then the
    # connection broke, and the client got the dialect's error event.
    provider = await FakeProvider(cut_after=len(FakeProvider().events()) - 1).start()
    r = await rig(provider, store)
    async with r.openai() as client:
        events = await client.chat.completions.create(model="m", messages=ASK, temperature=0,
                                                      stream=True)
        with pytest.raises(openai.APIError):
            async for _ in events:
                pass
    await r.close()  # every request has ended, and was counted
    await settled(r)
    await provider.close()
    assert r.cache is not None and await r.cache.store.count() == {}
    assert r.meter is not None
    await r.meter.flush()
    (row,) = store.usage.usage()
    assert (row.requests, row.errors) == (1, 1)


async def test_a_tool_call_is_passed_on_and_never_kept(provider: FakeProvider, store: Store) -> None:
    tools: Any = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    r = await rig(provider, store)
    async with r.openai() as client:
        for _ in range(2):
            answer = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "weather?"}], tools=tools,
                temperature=0)
            await settled(r)
            assert answer.choices[0].finish_reason == "tool_calls"
    await r.close()
    assert len(provider.requests) == 2


# --- the guard -------------------------------------------------------------------------------------

MARKER = "BOMB"


@pytest.fixture
async def judge() -> AsyncIterator[FakeJudge]:
    j = await FakeJudge().start()
    yield j
    await j.close()


async def guarded(judge: FakeJudge, *, input: bool, output: bool,
                  records: list[VerdictRecord]) -> tuple[Guard, JudgeClient, list[GuardView]]:
    """A guard over `judge` with one policy; the view is the list's last, for a test to change."""
    client = JudgeClient(lambda name: [JudgeTarget(KNOWN[DEFAULT_JUDGE], judge.url)])
    await client.start()
    views = [GuardView(enabled=True, policies=(Policy(name="p", judges=["j"], input=input,
                                                      output=output),))]
    guard = Guard(client, lambda: views[-1], records.append, lambda: datetime.now(UTC),
                  time.monotonic)
    return guard, client, views


async def test_an_answer_the_output_guard_blocked_is_never_kept(
        store: Store, judge: FakeJudge) -> None:
    provider = await FakeProvider(body=FakeProvider().whole().replace(b"wide", MARKER.encode())
                                  ).start()
    judge.rule(MARKER, "Violent")
    records: list[VerdictRecord] = []
    guard, client, _ = await guarded(judge, input=False, output=True, records=records)
    r = await rig(provider, store, guard=guard)
    async with r.openai() as oai:
        for _ in range(2):
            with pytest.raises(openai.APIStatusError):
                await oai.chat.completions.create(model="m", messages=ASK, temperature=0)
            await settled(r)
    await r.close()
    await client.close()
    await provider.close()
    assert len(provider.requests) == 2


async def test_a_hit_still_passes_the_input_guard(provider: FakeProvider, store: Store,
                                                  judge: FakeJudge) -> None:
    records: list[VerdictRecord] = []
    guard, client, _ = await guarded(judge, input=True, output=False, records=records)
    r = await rig(provider, store, guard=guard)
    async with r.openai() as oai:
        await ask(r, oai, times=2)
        judge.unsafe("Violent")  # the judge now refuses the very prompt whose answer is kept
        with pytest.raises(openai.BadRequestError):
            await oai.chat.completions.create(model="m", messages=ASK, temperature=0)
    assert r.meter is not None
    await r.meter.flush()
    await r.close()
    await client.close()
    assert len(provider.requests) == 1
    assert [rec.direction.value for rec in records] == ["input", "input", "input"]
    (row,) = store.usage.usage()
    assert (row.requests, row.cache_hits, row.blocked) == (3, 1, 1)  # the refused hit saved nothing


async def test_a_changed_output_policy_leaves_the_answers_it_passed_behind(
        provider: FakeProvider, store: Store, judge: FakeJudge) -> None:
    records: list[VerdictRecord] = []
    guard, client, views = await guarded(judge, input=False, output=True, records=records)
    r = await rig(provider, store, guard=guard)
    async with r.openai() as oai:
        await ask(r, oai)
        views.append(GuardView(enabled=True, policies=(Policy(
            name="p", judges=["j"], input=False, output=True, block_categories=["Violent"]),)))
        resp = await oai.chat.completions.with_raw_response.create(
            model="m", messages=ASK, temperature=0)
    await r.close()
    await client.close()
    assert resp.headers["x-llmgw-cache"] == "miss" and len(provider.requests) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_answer_let_through_while_the_judge_was_down_is_never_kept(
        provider: FakeProvider, store: Store, judge: FakeJudge, stream: bool) -> None:
    records: list[VerdictRecord] = []
    guard, client, views = await guarded(judge, input=False, output=True, records=records)
    views.append(GuardView(enabled=True, policies=(Policy(
        name="p", judges=["j"], input=False, output=True, on_failure=OnFailure.OPEN),)))
    r = await rig(provider, store, guard=guard)

    async def cached_as() -> str:
        resp = await oai.chat.completions.with_raw_response.create(
            model="m", messages=ASK, temperature=0, stream=stream)
        if stream:
            assert "".join([c.choices[0].delta.content or "" async for c in resp.parse()
                            if c.choices]) == ANSWER
        else:
            assert resp.parse().choices[0].message.content == ANSWER
        await settled(r)
        return str(resp.headers["x-llmgw-cache"])

    async with r.openai() as oai:
        judge.error()  # the judge is down: the policy lets the answer through unjudged
        let_through = await cached_as()
        judge.safe()  # back: the same request is judged, not served what nobody judged
        judged = [await cached_as(), await cached_as()]
    await r.close()
    await client.close()
    assert (let_through, judged) == ("miss", ["miss", "hit"])
    assert len(provider.requests) == 2
    assert [(rec.outcome.value, rec.let_through) for rec in records] == [
        ("failed_error", True), ("safe", False)]


def test_only_an_answer_every_covering_output_policy_judged_is_admitted() -> None:
    guarded_probe = Probe("k", "m", 60, lookup=True, store=True, guarded=True)
    judged, let_through, never = (Exchange(UsageTap(), judged=j) for j in (True, False, None))
    assert admits(guarded_probe, judged, 200)
    assert not admits(guarded_probe, let_through, 200)
    assert not admits(guarded_probe, never, 200)  # a judgment that never ran is no pass
    assert admits(replace(guarded_probe, guarded=False), never, 200)  # nothing covers it
    assert not admits(guarded_probe, Exchange(UsageTap(), judged=True, broke=True), 200)
    assert not admits(guarded_probe, Exchange(UsageTap(), judged=True, blocked=True), 200)
    assert not admits(replace(guarded_probe, store=False), judged, 200)  # `no-store`
    assert not admits(guarded_probe, judged, 502)


# --- by meaning ------------------------------------------------------------------------------------


async def semantic_cache(provider: FakeProvider, transport: Transport) -> ResponseCache:
    """A semantic cache for every model, embedding with `provider` (as model `e`). The fake's
    embeddings are bags of words: the same words in any order or case are one meaning; one
    word more or less is another."""
    await transport.start()
    embedder = remote_model("e", api=ProviderApi.OPENAI, api_key_env=None)
    table = RoutingTable({"e": Serving(embedder, (Upstream("e-1", provider.url),))})
    settings = CacheSettings(mode=CacheMode.SEMANTIC, embedding_model="e", similarity=0.99)
    return ResponseCache(settings, InMemory(MemoryCache(100, 2**20, time.monotonic)),
                         Embedder(transport, lambda: table, "e"))


async def test_a_request_that_means_the_same_is_served_the_kept_answer(
        provider: FakeProvider, store: Store) -> None:
    transport = Transport(timeout_s=5)
    cache = await semantic_cache(provider, transport)
    other, other_key = user_key(name="other")
    r = await rig(provider, store, cache=cache, others=[(other, other_key)])

    async def ask(text: str, system: str | None = None, key: str | None = None) -> str:
        messages: Any = [{"role": "user", "content": text}]
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        async with openai.AsyncOpenAI(base_url=r.url + "/v1", api_key=key or r.plaintext,
                                      max_retries=0) as client:
            resp = await client.chat.completions.with_raw_response.create(
                model="m", messages=messages, temperature=0)
        await settled(r)
        assert resp.parse().choices[0].message.content == ANSWER
        return resp.headers["x-llmgw-cache"]

    assert await ask("How wide is the sea?") == "miss"
    assert await ask("how WIDE is the sea") == "hit"  # the same words: the same meaning
    assert await ask("How wide is the sea today?") == "miss"  # a word more
    assert await ask("how WIDE is the sea", system="Answer in French.") == "miss"  # another bucket
    assert await ask("how WIDE is the sea", key=other) == "miss"  # another tenant
    await r.close()
    await transport.close()
    assert len(provider.requests) == 4
    assert provider.embedded[:2] == ["How wide is the sea?", "how WIDE is the sea"]


PNG_A, PNG_B = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB", "iVBORw0KGgoAAAANSUhEUgAAAAIAAAAC"


@pytest.mark.parametrize("part", [
    lambda data: {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
    lambda data: {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
    lambda data: {"type": "file", "file": {"file_data": data, "filename": "a.pdf"}},
], ids=["image", "audio", "file"])
async def test_the_same_words_about_another_image_are_another_question(
        provider: FakeProvider, store: Store, part: Callable[[str], Any]) -> None:
    transport = Transport(timeout_s=5)
    r = await rig(provider, store, cache=await semantic_cache(provider, transport))

    async def ask(text: str, data: str, earlier: str | None = None) -> str:
        messages: Any = [{"role": "user", "content": [{"type": "text", "text": text}, part(data)]}]
        if earlier is not None:  # the same words, the other image in an earlier turn
            messages[:0] = [{"role": "user", "content": [part(earlier)]},
                            {"role": "assistant", "content": "I see."}]
        async with r.openai() as client:
            resp = await client.chat.completions.with_raw_response.create(
                model="m", messages=messages, temperature=0)
        await settled(r)
        return str(resp.headers["x-llmgw-cache"])

    assert await ask("What is in this picture?", PNG_A) == "miss"
    assert await ask("What is in this picture?", PNG_B) == "miss"  # another image: its own answer
    assert await ask("what IS in this picture", PNG_A) == "hit"  # the same image, by meaning
    assert await ask("what IS in this picture", PNG_A, earlier=PNG_A) == "miss"
    assert await ask("What is in this picture?", PNG_A, earlier=PNG_B) == "miss"
    await r.close()
    await transport.close()
    assert len(provider.requests) == 4


async def test_without_its_embedding_model_a_semantic_cache_is_exact(
        provider: FakeProvider, store: Store) -> None:
    transport = Transport(timeout_s=5)
    await transport.start()
    settings = CacheSettings(mode=CacheMode.SEMANTIC, embedding_model="gone")
    cache = ResponseCache(settings, InMemory(MemoryCache(100, 2**20, time.monotonic)),
                          Embedder(transport, lambda: RoutingTable({}), "gone"))
    r = await rig(provider, store, cache=cache)
    async with r.openai() as client:
        for text in ("How wide is the sea?", "how WIDE is the sea", "How wide is the sea?"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}], temperature=0)
            await settled(r)
    await r.close()
    await transport.close()
    assert len(provider.requests) == 2


async def test_a_burst_of_hits_gets_exactly_the_keys_rpm(provider: FakeProvider, store: Store) -> None:
    r = await rig(provider, store, limits=Limits(rpm=10))
    async with r.openai() as client:
        await ask(r, client)

        async def one() -> int:
            try:
                resp = await client.chat.completions.with_raw_response.create(
                    model="m", messages=ASK, temperature=0)
            except openai.RateLimitError:
                return 429
            assert resp.headers["x-llmgw-cache"] == "hit"
            return 200

        statuses = await asyncio.gather(*(one() for _ in range(30)))
    await r.close()
    assert statuses.count(200) == 9 and statuses.count(429) == 21  # 10 with the miss
    assert len(provider.requests) == 1
