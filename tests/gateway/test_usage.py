"""Reading token usage from upstream answers, and the usage meter's batched, additive writes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.types import UsageRow
from llmgw.gateway.limits import Limiter
from llmgw.gateway.usage import MAX_COUNT, Tokens, UsageMeter, UsageTap
from llmgw.store.store import Store
from tests.factories import NOW
from tests.fakes.provider import ANSWER, USAGE, FakeProvider, GatewayRig

QUESTION = {"role": "user", "content": "how wide is the sea?"}

MODEL = "gemma3-270m"


# --- what llama-server sends -------------------------------------------------------------------


def event(data: dict[str, Any] | str) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {body}\n\n".encode()


def delta(**d: Any) -> bytes:
    return event({"choices": [{"finish_reason": None, "index": 0, "delta": d}], "created": 1,
                  "id": "chatcmpl-1", "model": MODEL, "object": "chat.completion.chunk"})


def last(usage: dict[str, int] | None) -> bytes:
    data: dict[str, Any] = {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}],
                            "created": 1, "id": "chatcmpl-1", "model": MODEL,
                            "object": "chat.completion.chunk",
                            "timings": {"prompt_n": 9, "predicted_n": 3, "predicted_ms": 12.5}}
    if usage is not None:
        data["usage"] = usage
    return event(data)


WORDS = ["The", " sea", " is", " wide", "."]


def stream(usage: dict[str, int] | None) -> list[bytes]:
    return [delta(role="assistant", content=None), *(delta(content=w) for w in WORDS), last(usage),
            event("[DONE]")]


def tap_stream(chunks: list[bytes]) -> Tokens:
    tap = UsageTap()
    for c in chunks:
        tap.chunk(c)
    return tap.result()


# --- UsageTap ----------------------------------------------------------------------------------


def test_a_whole_answer_reports_its_usage_numbers() -> None:
    body = json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
        # Numbers in the text and nested usage details must not be mistaken for usage.
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": 'say "prompt_tokens": 999 and "completion_tokens": 999'}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
                  "prompt_tokens_details": {"cached_tokens": 4},
                  "completion_tokens_details": {"reasoning_tokens": 0}},
    }, indent=1).encode()
    tap = UsageTap()
    tap.whole(body)
    assert tap.result() == Tokens(12, 5)
    assert tap.result().total == 17


def test_an_embeddings_answer_has_prompt_tokens_only() -> None:
    tap = UsageTap()
    tap.whole(b'{"data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":8,"total_tokens":8}}')
    assert tap.result() == Tokens(8, 0)


def test_an_answer_without_usage_counts_nothing() -> None:
    tap = UsageTap()
    tap.whole(b'{"error":{"message":"model is loading","code":503}}')
    assert tap.result() == Tokens(0, 0)


def test_a_stream_with_a_final_usage_event_reports_it() -> None:
    usage = {"completion_tokens": 3, "prompt_tokens": 9, "total_tokens": 12}
    assert tap_stream(stream(usage)) == Tokens(9, 3)


def test_a_stream_without_usage_counts_its_text_events() -> None:
    # One token per event that carries text; the role event and the empty last one carry none.
    chunks = stream(None)
    assert tap_stream(chunks) == Tokens(0, len(WORDS))
    assert tap_stream([*chunks[:-3], delta(content=""), *chunks[-2:]]) == Tokens(0, len(WORDS) - 1)


def test_a_legacy_completions_stream_counts_text_events() -> None:
    chunks = [event({"choices": [{"index": 0, "text": w, "finish_reason": None}]}) for w in WORDS]
    assert tap_stream([*chunks, event("[DONE]")]) == Tokens(0, len(WORDS))


def test_several_events_in_one_chunk_are_each_counted() -> None:
    assert tap_stream([b"".join(stream(None))]) == Tokens(0, len(WORDS))


@pytest.mark.parametrize("cut", [5, 17, 18, 30, -40, -25])
def test_usage_split_across_two_chunks_is_read_whole(cut: int) -> None:
    usage = {"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168}
    chunks = stream(usage)
    final = chunks[-2]
    at = final.index(b'"usage"') + cut if cut > 0 else len(final) + cut
    split = [*chunks[:-2], final[:at], final[at:], chunks[-1]]
    assert b"".join(split) == b"".join(chunks)
    assert tap_stream(split) == Tokens(123, 45)


def test_usage_after_a_long_stream_is_still_found() -> None:
    many = [delta(content="x" * 100) for _ in range(500)]
    usage = {"prompt_tokens": 7, "completion_tokens": 500, "total_tokens": 507}
    assert tap_stream([*many, last(usage), event("[DONE]")]) == Tokens(7, 500)


def test_a_text_event_split_across_two_chunks_is_counted_once() -> None:
    # The upstream's bytes arrive as the network delivers them: an event may be cut anywhere,
    # here right after `"content":"`, so neither half holds the whole marker.
    chunks = stream(None)
    word = chunks[2]
    at = word.index(b'"content":"') + len(b'"content":"')
    split = [*chunks[:2], word[:at], word[at:], *chunks[3:]]
    assert b"".join(split) == b"".join(chunks)
    assert tap_stream(split) == Tokens(0, len(WORDS))


# --- UsageMeter --------------------------------------------------------------------------------


def rows(store: Store) -> dict[tuple[str, str, str], tuple[int, int, int, int, int]]:
    return {(r.key_id, r.model, r.day): (r.requests, r.prompt_tokens, r.completion_tokens, r.errors,
                                         r.blocked) for r in store.usage.usage()}


async def test_the_meter_aggregates_per_key_model_and_day(store: Store) -> None:
    clock = FakeClock(NOW)
    meter = UsageMeter(store, clock.now)
    meter.record("key-a", MODEL, Tokens(10, 5), error=False, blocked=False)
    meter.record("key-a", MODEL, Tokens(20, 1), error=True, blocked=False)
    meter.record("key-a", "other", Tokens(1, 1), error=False, blocked=True)
    meter.record("key-b", MODEL, Tokens(3, 3), error=False, blocked=False)
    clock.advance(86400)
    meter.record("key-a", MODEL, Tokens(7, 7), error=False, blocked=False)
    assert store.usage.usage() == []  # nothing is written until a flush

    await meter.flush()
    assert rows(store) == {
        ("key-a", MODEL, "2026-01-01"): (2, 30, 6, 1, 0),
        ("key-a", "other", "2026-01-01"): (1, 1, 1, 0, 1),
        ("key-b", MODEL, "2026-01-01"): (1, 3, 3, 0, 0),
        ("key-a", MODEL, "2026-01-02"): (1, 7, 7, 0, 0),
    }
    assert store.usage.usage("key-a", MODEL, "2026-01-02") == [
        UsageRow(key_id="key-a", model=MODEL, day="2026-01-02", requests=1, prompt_tokens=7,
                 completion_tokens=7)
    ]

    await meter.flush()  # nothing new: nothing changes
    meter.record("key-a", MODEL, Tokens(1, 2), error=False, blocked=False)
    await meter.flush()  # additive: the second flush adds to the row the first wrote
    assert rows(store)[("key-a", MODEL, "2026-01-02")] == (2, 8, 9, 0, 0)
    assert store.usage.tokens_since(["key-a", "key-b"], "2026-01-01") == {"key-a": 55, "key-b": 6}
    assert store.usage.tokens_since(["key-a"], "2026-01-02") == {"key-a": 17}


async def test_two_meters_on_one_store_add_up(store: Store) -> None:
    clock = FakeClock(NOW)
    one, two = UsageMeter(store, clock.now), UsageMeter(store, clock.now)
    for i in range(10):
        one.record("key-a", MODEL, Tokens(i, 1), error=False, blocked=False)
        two.record("key-a", MODEL, Tokens(1, i), error=i == 0, blocked=False)
        if i % 3 == 0:
            await one.flush()
        if i % 4 == 0:
            await two.flush()
    await one.flush()
    await two.flush()
    assert rows(store) == {("key-a", MODEL, "2026-01-01"): (20, 45 + 10, 10 + 45, 1, 0)}


async def test_a_failed_flush_keeps_the_counts_for_the_next(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(NOW)
    meter = UsageMeter(store, clock.now)
    meter.record("key-a", MODEL, Tokens(10, 5), error=False, blocked=False)

    real = store.usage.add_usage
    calls: list[int] = []

    def fails_once(batch: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        real(batch)

    monkeypatch.setattr(store.usage, "add_usage", fails_once)
    with pytest.raises(RuntimeError):
        await meter.flush()
    assert store.usage.usage() == []

    meter.record("key-a", MODEL, Tokens(1, 1), error=True, blocked=False)  # recorded meanwhile
    await meter.flush()
    assert rows(store) == {("key-a", MODEL, "2026-01-01"): (2, 11, 6, 1, 0)}
    assert len(calls) == 2


# --- upstreams that lie about usage --------------------------------------------------------------


def whole_answer(usage: bytes | None, content: str = "The sea is wide.") -> bytes:
    head = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}]},
                      separators=(",", ":")).encode()
    return head if usage is None else head[:-1] + b',"usage":' + usage + b"}"


PROMPT_ESTIMATE = 40
# "The sea is wide." is 16 bytes: about 4 tokens.
TEXT_ESTIMATE = 4


@pytest.mark.parametrize(("usage", "expected"), [
    (b'{"prompt_tokens":12,"completion_tokens":5}', Tokens(12, 5)),
    (b'{"prompt_tokens":100000000000000000000,"completion_tokens":5}', Tokens(MAX_COUNT, 5)),
    (b'{"prompt_tokens":7,"completion_tokens":' + b"9" * 400 + b"}", Tokens(7, MAX_COUNT)),
    (b'{"prompt_tokens":-5,"completion_tokens":-1}', Tokens(PROMPT_ESTIMATE, TEXT_ESTIMATE)),
    (b'{"prompt_tokens":12.5,"completion_tokens":1e3}', Tokens(PROMPT_ESTIMATE, TEXT_ESTIMATE)),
    (b'{"prompt_tokens":"12","completion_tokens":null}', Tokens(PROMPT_ESTIMATE, TEXT_ESTIMATE)),
    (b'{"prompt_tokens":12,"completion_tokens":true}', Tokens(12, TEXT_ESTIMATE)),
    (None, Tokens(PROMPT_ESTIMATE, TEXT_ESTIMATE)),  # no usage at all: not free
])
def test_a_whole_answers_usage_is_clamped_and_what_cannot_be_believed_estimated(
    usage: bytes | None, expected: Tokens
) -> None:
    tap = UsageTap()
    tap.whole(whole_answer(usage))
    assert tap.result(prompt_estimate=PROMPT_ESTIMATE) == expected


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 10**20, "completion_tokens": 3}, Tokens(MAX_COUNT, 3)),
    ({"prompt_tokens": -9, "completion_tokens": -3}, Tokens(PROMPT_ESTIMATE, len(WORDS))),
    ({"prompt_tokens": 9.5, "completion_tokens": "3"}, Tokens(PROMPT_ESTIMATE, len(WORDS))),
])
def test_a_streams_usage_is_clamped_and_what_cannot_be_believed_estimated(
    usage: dict[str, Any], expected: Tokens
) -> None:
    tap = UsageTap()
    for c in stream(usage):  # type: ignore[arg-type]
        tap.chunk(c)
    assert tap.result(prompt_estimate=PROMPT_ESTIMATE) == expected


async def test_a_row_the_database_refuses_blocks_neither_the_others_nor_the_limit_sync(
    any_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(NOW)
    meter = UsageMeter(any_store, clock.now)
    limiter = Limiter(any_store, clock.now)
    meter.record("key-a", MODEL, Tokens(10, 5), error=False, blocked=False)
    # More than a 64-bit counter holds: only a caller that skipped the tap's clamp can do this.
    meter.record("key-bad", MODEL, Tokens(10**20, 1), error=False, blocked=False)
    meter.record("key-b", MODEL, Tokens(3, 3), error=False, blocked=False)
    await limiter.sync(meter.flush)  # neither raises nor keeps the bad row for ever
    assert rows(any_store) == {("key-a", MODEL, "2026-01-01"): (1, 10, 5, 0, 0),
                               ("key-b", MODEL, "2026-01-01"): (1, 3, 3, 0, 0)}
    assert "usage row refused by the database, dropped: key key-bad" in caplog.text

    meter.record("key-a", MODEL, Tokens(1, 1), error=False, blocked=False)
    await limiter.sync(meter.flush)  # later usage is recorded as before
    assert rows(any_store)[("key-a", MODEL, "2026-01-01")] == (2, 11, 6, 0, 0)


async def test_an_upstream_lying_about_usage_is_recorded_clamped_with_everything_else(
    any_store: Store,
) -> None:
    provider = await FakeProvider(usage=b'{"prompt_tokens":100000000000000000000,'
                                        b'"completion_tokens":-4}').start()
    rig = await GatewayRig(provider, any_store).start()
    try:
        async with rig.openai() as client:
            lied = await client.chat.completions.create(model="m", messages=[QUESTION])
            assert lied.choices[0].message.content == ANSWER
            provider.usage = None  # says nothing: not free either
            await client.chat.completions.create(model="m", messages=[QUESTION])
            provider.usage = json.dumps(USAGE).encode()
            await client.chat.completions.create(model="m", messages=[QUESTION])
        assert rig.limiter is not None and rig.meter is not None
        await rig.limiter.sync(rig.meter.flush)
    finally:
        await rig.close()
        await provider.close()
    [row] = any_store.usage.usage()
    # The lie counts as MAX_COUNT prompt tokens and an estimated completion; the silent answer
    # as estimates; the honest one as it said.
    text = math.ceil(len(ANSWER) / 4)
    assert row.requests == 3
    assert row.completion_tokens == text + text + USAGE["completion_tokens"]
    assert MAX_COUNT < row.prompt_tokens < MAX_COUNT + 100
