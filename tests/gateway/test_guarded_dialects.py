"""The guard judges every dialect: Anthropic's Messages (an upstream speaking it natively, and one
llmgw translates to chat completions for), OpenAI's Responses (always served from chat
completions) and chat completions, through llmgw's real data plane and the official SDKs.

Input is refused before the upstream is called; a whole unsafe answer is refused; a stream that
turns unsafe stops before the unsafe window with that dialect's own blocked ending; tool
arguments are judged like text; a blocked request counts as blocked, not as an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from llmgw.core.guard import InputMode, Outcome, Policy, VerdictRecord
from llmgw.core.judges import DEFAULT_JUDGE, KNOWN
from llmgw.core.types import Model, ProviderApi, UsageRow
from llmgw.guard.enforcement import Guard, GuardView
from llmgw.guard.judge_client import JudgeClient, JudgeTarget
from llmgw.store.store import Store
from tests.factories import remote_model
from tests.fakes.anthropic_provider import API_KEY, TOOL_INPUT, FakeAnthropicProvider
from tests.fakes.judge import FakeJudge
from tests.fakes.provider import TOOL_ARGUMENTS, WORDS, Answer, FakeProvider, GatewayRig

MARKER = "BOMB"
WINDOW = 10
# Five characters a piece, so a window of ten is two pieces: the marker is in the sixth piece,
# the third window. The first two windows are what a blocked stream may deliver.
PIECES = ["Calm ", "seas ", "today", " and ", "then ", "BOMB!", " more", " text", " end."]
assert all(len(p) == 5 for p in PIECES)
SAFE_TEXT = "".join(PIECES[:4])
TOOL_MARKER = "Paris"  # in the arguments both fakes call the first offered tool with
assert TOOL_MARKER in TOOL_ARGUMENTS.values() and TOOL_MARKER in TOOL_INPUT.values()
QUESTION = "Tell me about the sea."
WEATHER_QUESTION = "What is the weather like?"
POLICY = "dialects"

ANTHROPIC_TOOL = {"name": "get_weather", "description": "The weather in a city.",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
CHAT_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@dataclass
class WordyProvider(FakeProvider):
    """A chat-only provider whose text answer is `words` instead of the fixed one."""

    words: list[str] = field(default_factory=lambda: list(PIECES))

    def _text(self, answer: Answer | None) -> Answer:
        if answer is None or (answer.tool is None and answer.pieces == WORDS):
            return Answer(list(self.words))
        return answer

    def whole(self, answer: Answer | None = None) -> bytes:
        return super().whole(self._text(answer))

    def events(self, answer: Answer | None = None, include_usage: bool = False) -> list[bytes]:
        return super().events(self._text(answer), include_usage)


# --- the guard over a fake judge -------------------------------------------------------------------


@dataclass
class Judging:
    """A guard over a fake judge, with the policies a test sets."""

    judge: FakeJudge
    guard: Guard
    records: list[VerdictRecord]
    view: GuardView = field(default_factory=lambda: GuardView(enabled=True))

    def policy(self, *, input: bool = True, output: bool = False, mode: InputMode = InputMode.BEFORE) -> None:
        self.view = GuardView(enabled=True, policies=(Policy(
            name=POLICY, judges=["j"], input=input, output=output, input_mode=mode,
            stream_window_chars=WINDOW),))


@pytest.fixture
async def judging() -> AsyncIterator[Judging]:
    judge = await FakeJudge().start()
    client = JudgeClient(lambda name: [JudgeTarget(KNOWN[DEFAULT_JUDGE], judge.url)])
    await client.start()
    holder: list[Judging] = []
    records: list[VerdictRecord] = []
    guard = Guard(client, lambda: holder[0].view, records.append, lambda: datetime.now(UTC), time.monotonic)
    holder.append(Judging(judge, guard, records))
    try:
        yield holder[0]
    finally:
        await client.close()
        await judge.close()


# --- the upstreams ---------------------------------------------------------------------------------

Upstream = FakeProvider | FakeAnthropicProvider


@asynccontextmanager
async def serving(
    upstream: str, store: Store, judging: Judging
) -> AsyncIterator[tuple[GatewayRig, Upstream]]:
    """llmgw in front of one kind of upstream for model `m`: `anthropic` (a local model whose
    engine answers Messages natively), `translated` (a remote provider speaking chat completions
    only, so Messages are translated) or `chat` (a local model's chat completions)."""
    provider: Upstream
    model: Model | None = None
    headers: dict[str, str] = {}
    if upstream == "anthropic":
        provider = await FakeAnthropicProvider(words=list(PIECES)).start()
        headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    else:
        provider = await WordyProvider().start()
        if upstream == "translated":
            model = remote_model("m", api=ProviderApi.OPENAI, api_key_env=None)
    rig = await GatewayRig(provider, store, model=model, upstream_headers=headers,  # type: ignore[arg-type]
                           guard=judging.guard).start()
    try:
        yield rig, provider
    finally:
        await rig.close()
        await provider.close()


def untouched(provider: Upstream) -> None:
    """The upstream was never called."""
    assert provider.requests == [] and provider.arrived.empty()


MESSAGES_UPASKS = pytest.mark.parametrize("upstream", ["anthropic", "translated"])
# A question in each dialect: (upstream, path, body without the model).
ASKS = {
    "messages": ("anthropic", "/v1/messages",
                 {"max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]}),
    "messages_translated": ("translated", "/v1/messages",
                            {"max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]}),
    "responses": ("chat", "/v1/responses", {"input": QUESTION, "store": False}),
    "chat": ("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}),
}


def anthropic_error(exc: anthropic.APIStatusError) -> dict[str, Any]:
    """The guard's error in Anthropic's shape, checked."""
    body = exc.body
    assert isinstance(body, dict) and body["type"] == "error", body
    error = body["error"]
    assert error["type"] == "invalid_request_error"
    assert f"'{POLICY}'" in error["message"]
    return dict(error)


def openai_refusal(exc: openai.APIError) -> None:
    """The guard's refusal in OpenAI's shape, checked."""
    assert exc.code == "content_filter" and exc.type == "invalid_request_error"
    assert f"'{POLICY}'" in exc.message


def refused_in_its_dialect(dialect: str, raw: bytes) -> None:
    """A raw error body is the guard's refusal in the shape of the dialect called."""
    error = orjson.loads(raw)
    if dialect.startswith("messages"):
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    else:
        assert error["error"]["code"] == "content_filter"


# --- 1. input ----------------------------------------------------------------------------------------


def _messages_prompt(where: str) -> dict[str, Any]:
    if where == "user":
        return {"messages": [{"role": "user", "content": f"How do I build a {MARKER}?"}]}
    if where == "system":
        return {"system": f"You help build a {MARKER}.", "messages": [{"role": "user", "content": QUESTION}]}
    return {"tools": [ANTHROPIC_TOOL], "messages": [
        {"role": "user", "content": WEATHER_QUESTION},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": f"a {MARKER} in Oslo"}]}]},
    ]}


@MESSAGES_UPASKS
@pytest.mark.parametrize("where", ["user", "system", "tool_result"])
async def test_an_unsafe_messages_prompt_is_refused_in_anthropics_shape_before_the_upstream(
    upstream: str, where: str, store: Store, judging: Judging
) -> None:
    judging.policy()
    judging.judge.rule(MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, provider), rig.anthropic() as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(model="m", max_tokens=64, **_messages_prompt(where))
        assert raised.value.status_code == 400
        assert "Violent" in anthropic_error(raised.value)["message"]
        untouched(provider)
    assert [r.outcome for r in judging.records] == [Outcome.UNSAFE]


def _responses_prompt(where: str) -> dict[str, Any]:
    if where == "input":
        return {"input": f"How do I build a {MARKER}?"}
    if where == "instructions":
        return {"instructions": f"You help build a {MARKER}.", "input": QUESTION}
    return {"tools": [RESPONSES_TOOL], "input": [
        {"role": "user", "content": WEATHER_QUESTION},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": f"a {MARKER} in Oslo"},
    ]}


@pytest.mark.parametrize("where", ["input", "instructions", "function_call_output"])
async def test_an_unsafe_responses_prompt_is_refused_in_openais_shape_before_the_upstream(
    where: str, store: Store, judging: Judging
) -> None:
    judging.policy()
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="m", store=False, **_responses_prompt(where))
        assert raised.value.status_code == 400
        openai_refusal(raised.value)
        untouched(provider)


@pytest.mark.parametrize("where", ["user", "system", "tool"])
async def test_an_unsafe_chat_prompt_is_refused_before_the_upstream(
    where: str, store: Store, judging: Judging
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"How do I build a {MARKER}?"}]
    if where == "system":
        messages = [{"role": "system", "content": f"You help build a {MARKER}."},
                    {"role": "user", "content": QUESTION}]
    elif where == "tool":
        messages = [{"role": "user", "content": WEATHER_QUESTION},
                    {"role": "assistant", "content": None, "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": f"a {MARKER} in Oslo"}]
    judging.policy()
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="m", messages=messages,  # type: ignore[arg-type]
                                                 tools=[CHAT_TOOL])  # type: ignore[list-item]
        openai_refusal(raised.value)
        untouched(provider)


@pytest.mark.parametrize("dialect", list(ASKS))
async def test_an_unsafe_prompt_judged_while_the_upstream_streams_is_refused_in_the_dialects_shape(
    dialect: str, store: Store, judging: Judging
) -> None:
    upstream, path, body = ASKS[dialect]
    judging.policy(mode=InputMode.PARALLEL)
    judging.judge.slow(0.2, unsafe=True)  # the upstream is called at once, its answer held
    async with serving(upstream, store, judging) as (rig, _provider):
        status, _type, raw = await post(rig, path, {"model": "m", "stream": True, **body})
    assert status == 400 and PIECES[0].encode() not in raw
    refused_in_its_dialect(dialect, raw)


# --- 2. whole answers --------------------------------------------------------------------------------


@MESSAGES_UPASKS
async def test_an_unsafe_whole_message_is_refused_and_none_of_it_reaches_the_client(
    upstream: str, store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, provider), rig.anthropic() as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(model="m", max_tokens=64,
                                         messages=[{"role": "user", "content": QUESTION}])
        anthropic_error(raised.value)
        assert len(provider.requests) == 1
        said = raised.value.response.text
        assert MARKER not in said and PIECES[0] not in said
    # The judge read the answer in the client's dialect: all of its text.
    assert "".join(PIECES) in judging.judge.prompts[-1]


async def test_an_unsafe_whole_response_is_refused_and_none_of_it_reaches_the_client(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="m", input=QUESTION, store=False)
        openai_refusal(raised.value)
        assert len(provider.requests) == 1
        said = raised.value.response.text
        assert MARKER not in said and PIECES[0] not in said


async def test_an_unsafe_whole_chat_answer_is_refused_and_none_of_it_reaches_the_client(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        openai_refusal(raised.value)
        said = raised.value.response.text
        assert MARKER not in said and PIECES[0] not in said


# --- 3. streams that turn unsafe ---------------------------------------------------------------------


def stream_cut_at_the_third_window(judging: Judging) -> None:
    """Three judgments of the answer so far: two safe windows, then the unsafe one."""
    assert [r.outcome for r in judging.records] == [Outcome.SAFE, Outcome.SAFE, Outcome.UNSAFE]
    assert "".join(PIECES[:6]) in judging.judge.prompts[-1]


@MESSAGES_UPASKS
async def test_a_messages_stream_iterated_raw_stops_before_the_unsafe_window(
    upstream: str, store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, _provider), rig.anthropic() as client:
        kinds: list[str] = []
        text = ""
        stream = await client.messages.create(model="m", max_tokens=64, stream=True,
                                              messages=[{"role": "user", "content": QUESTION}])
        with pytest.raises(anthropic.APIStatusError) as raised:
            async for event in stream:
                kinds.append(event.type)
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text += event.delta.text
                if event.type == "message_delta":
                    assert event.delta.stop_reason == "refusal"
        assert text == SAFE_TEXT
        assert kinds[0] == "message_start" and kinds[-1] == "message_delta"
        assert "message_stop" not in kinds
        assert "Violent" in anthropic_error(raised.value)["message"]
    stream_cut_at_the_third_window(judging)


@MESSAGES_UPASKS
async def test_a_messages_stream_helper_raises_with_the_refusal_accumulated(
    upstream: str, store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, _provider), rig.anthropic() as client:
        texts: list[str] = []
        async with client.messages.stream(model="m", max_tokens=64,
                                          messages=[{"role": "user", "content": QUESTION}]) as stream:
            with pytest.raises(anthropic.APIStatusError) as raised:
                async for piece in stream.text_stream:
                    texts.append(piece)
            snapshot = stream.current_message_snapshot
        assert "".join(texts) == SAFE_TEXT
        anthropic_error(raised.value)
        assert snapshot.stop_reason == "refusal"
        assert [b.text for b in snapshot.content if b.type == "text"] == [SAFE_TEXT]


def sse_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """A stream's events as (event name, data) pairs; chat's unnamed events are named ''."""
    out = []
    for block in body.split(b"\n\n"):
        name, data = "", b""
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data = line[5:].strip()
        if data and data != b"[DONE]":
            out.append((name, orjson.loads(data)))
    return out


async def raw_stream(rig: GatewayRig, path: str, body: dict[str, Any]) -> bytes:
    """Every byte llmgw sent for one streamed request, read without any SDK."""
    status, content_type, raw = await post(rig, path, {"model": "m", "stream": True, **body})
    assert status == 200 and content_type == "text/event-stream"
    return raw


async def post(rig: GatewayRig, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    """One request to llmgw without any SDK: its status, content type and every byte of its body."""
    headers = {"Authorization": f"Bearer {rig.plaintext}"}
    async with aiohttp.ClientSession() as http, http.post(rig.url + path, json=body, headers=headers) as resp:
        return resp.status, resp.content_type, await resp.read()


@MESSAGES_UPASKS
async def test_a_blocked_messages_stream_never_carries_the_unsafe_bytes(
    upstream: str, store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, _provider):
        body = await raw_stream(rig, "/v1/messages", {
            "max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]})
    assert MARKER.encode() not in body and b" more" not in body
    events = sse_events(body)
    assert all(name == data["type"] for name, data in events)
    *_, (_, refusal), (_, error) = events
    assert refusal["delta"]["stop_reason"] == "refusal"
    assert error["error"]["type"] == "invalid_request_error"
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == SAFE_TEXT


async def test_a_responses_stream_ends_with_an_error_then_incomplete_content_filter(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider), rig.openai() as client:
        stream = await client.responses.create(model="m", input=QUESTION, store=False, stream=True)
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.incomplete"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == SAFE_TEXT
    error, incomplete = events[-2], events[-1]
    assert error.type == "error" and error.code == "content_filter" and f"'{POLICY}'" in error.message
    assert incomplete.type == "response.incomplete"
    assert incomplete.response.incomplete_details is not None
    assert incomplete.response.incomplete_details.reason == "content_filter"
    assert events[0].type == "response.created" and incomplete.response.id == events[0].response.id
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    stream_cut_at_the_third_window(judging)


async def test_a_responses_stream_helper_follows_a_blocked_stream_to_its_end(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider), rig.openai() as client:
        async with client.responses.stream(model="m", input=QUESTION, store=False) as stream:
            # No RuntimeError about the lifecycle's identity: the ending belongs to this response.
            events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["error", "response.incomplete"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == SAFE_TEXT
    incomplete = events[-1]
    assert incomplete.type == "response.incomplete"
    assert incomplete.response.incomplete_details is not None
    assert incomplete.response.incomplete_details.reason == "content_filter"
    assert MARKER not in incomplete.response.model_dump_json()


async def test_a_blocked_responses_stream_never_carries_the_unsafe_bytes(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider):
        body = await raw_stream(rig, "/v1/responses", {"input": QUESTION, "store": False})
    assert MARKER.encode() not in body and b" more" not in body
    events = sse_events(body)
    assert all(name == data["type"] for name, data in events)
    assert [name for name, _ in events[-2:]] == ["error", "response.incomplete"]
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert text == SAFE_TEXT


async def test_a_chat_stream_ends_with_content_filter_and_an_error(store: Store, judging: Judging) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider), rig.openai() as client:
        stream = await client.chat.completions.create(
            model="m", stream=True, messages=[{"role": "user", "content": QUESTION}])
        chunks = []
        with pytest.raises(openai.APIError) as raised:
            async for chunk in stream:
                chunks.append(chunk)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == SAFE_TEXT
    assert chunks[-1].choices[0].finish_reason == "content_filter"
    assert f"'{POLICY}'" in raised.value.message
    stream_cut_at_the_third_window(judging)


async def test_a_blocked_chat_stream_never_carries_the_unsafe_bytes(store: Store, judging: Judging) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider):
        body = await raw_stream(rig, "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": QUESTION}]})
    assert MARKER.encode() not in body and b" more" not in body
    assert body.endswith(b"data: [DONE]\n\n")
    *_, finish, (_, error) = sse_events(body)
    assert finish[1]["choices"][0]["finish_reason"] == "content_filter"
    assert error["error"]["code"] == "content_filter"


# --- 4. tool arguments -------------------------------------------------------------------------------


@MESSAGES_UPASKS
async def test_a_messages_tool_call_with_unsafe_arguments_is_blocked_in_the_stream(
    upstream: str, store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(TOOL_MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, _provider), rig.anthropic() as client:
        stream = await client.messages.create(
            model="m", max_tokens=64, stream=True, tools=[ANTHROPIC_TOOL],  # type: ignore[list-item]
            messages=[{"role": "user", "content": WEATHER_QUESTION}])
        arguments = ""
        stop_reasons = []
        with pytest.raises(anthropic.APIStatusError) as raised:
            async for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    arguments += event.delta.partial_json
                if event.type == "message_delta":
                    stop_reasons.append(event.delta.stop_reason)
        anthropic_error(raised.value)
        assert TOOL_MARKER not in arguments
        assert stop_reasons == ["refusal"]
    assert f"tool get_weather: {arguments}" in judging.judge.prompts[-1]
    assert TOOL_MARKER in judging.judge.prompts[-1]


async def test_a_responses_function_call_with_unsafe_arguments_is_blocked_in_the_stream(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(TOOL_MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider), rig.openai() as client:
        stream = await client.responses.create(model="m", input=WEATHER_QUESTION, store=False, stream=True,
                                               tools=[RESPONSES_TOOL])  # type: ignore[list-item]
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["error", "response.incomplete"]
    assert "response.output_item.added" in kinds  # the call itself was announced
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert TOOL_MARKER not in arguments
    assert "response.function_call_arguments.done" not in kinds
    assert TOOL_MARKER in judging.judge.prompts[-1]


async def test_a_chat_tool_call_with_unsafe_arguments_is_blocked_in_the_stream(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.rule(TOOL_MARKER, "Violent")
    async with serving("chat", store, judging) as (rig, _provider):
        body = await raw_stream(rig, "/v1/chat/completions", {
            "tools": [CHAT_TOOL], "messages": [{"role": "user", "content": WEATHER_QUESTION}]})
    assert TOOL_MARKER.encode() not in body
    *_, finish, (_, error) = sse_events(body)
    assert finish[1]["choices"][0]["finish_reason"] == "content_filter"
    assert error["error"]["code"] == "content_filter"
    assert TOOL_MARKER in judging.judge.prompts[-1]


TOOL_ASKS = {
    "messages": ("anthropic", "/v1/messages", {"max_tokens": 64, "tools": [ANTHROPIC_TOOL],
                                               "messages": [{"role": "user", "content": WEATHER_QUESTION}]}),
    "messages_translated": ("translated", "/v1/messages", {
        "max_tokens": 64, "tools": [ANTHROPIC_TOOL],
        "messages": [{"role": "user", "content": WEATHER_QUESTION}]}),
    "responses": ("chat", "/v1/responses", {"input": WEATHER_QUESTION, "store": False,
                                            "tools": [RESPONSES_TOOL]}),
    "chat": ("chat", "/v1/chat/completions", {"tools": [CHAT_TOOL],
                                              "messages": [{"role": "user", "content": WEATHER_QUESTION}]}),
}


@pytest.mark.parametrize("dialect", list(TOOL_ASKS))
async def test_a_whole_answer_calling_a_tool_with_unsafe_arguments_is_refused(
    dialect: str, store: Store, judging: Judging
) -> None:
    upstream, path, body = TOOL_ASKS[dialect]
    judging.policy(input=False, output=True)
    judging.judge.rule(TOOL_MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, _provider):
        status, _type, raw = await post(rig, path, {"model": "m", **body})
    assert status == 400 and TOOL_MARKER.encode() not in raw
    refused_in_its_dialect(dialect, raw)
    assert "tool get_weather: " in judging.judge.prompts[-1] and TOOL_MARKER in judging.judge.prompts[-1]


# --- 5. usage ----------------------------------------------------------------------------------------


def recorded(rig: GatewayRig) -> asyncio.Queue[None]:
    """One item per request the meter records, as it is recorded (a stream's once its reply is
    closed, which can be after the client read its last byte)."""
    assert rig.meter is not None
    meter, record = rig.meter, rig.meter.record
    queue: asyncio.Queue[None] = asyncio.Queue()

    def spy(*args: Any, **kwargs: Any) -> None:
        record(*args, **kwargs)
        queue.put_nowait(None)

    meter.record = spy  # type: ignore[method-assign]
    return queue


async def usage_row(rig: GatewayRig, store: Store, queue: asyncio.Queue[None], requests: int) -> UsageRow:
    """The one usage row, once `requests` requests were recorded and written."""
    async with asyncio.timeout(10):
        for _ in range(requests):
            await queue.get()
    assert rig.limiter is not None and rig.meter is not None
    await rig.limiter.sync(rig.meter.flush)
    [row] = store.usage.usage()
    return row


@pytest.mark.parametrize("dialect", list(ASKS))
async def test_a_blocked_stream_counts_as_blocked_and_not_as_an_error(
    dialect: str, store: Store, judging: Judging
) -> None:
    upstream, path, body = ASKS[dialect]
    judging.policy(input=False, output=True)
    judging.judge.rule(MARKER, "Violent")
    async with serving(upstream, store, judging) as (rig, _provider):
        queue = recorded(rig)
        streamed = await raw_stream(rig, path, body)
        assert MARKER.encode() not in streamed
        # A whole answer refused counts the same way.
        status, _type, whole = await post(rig, path, {"model": "m", **body})
        assert status == 400 and MARKER.encode() not in whole
        row = await usage_row(rig, store, queue, 2)
    assert (row.requests, row.blocked, row.errors) == (2, 2, 0)
    assert row.completion_tokens > 0  # what was generated before the block was still used


# --- the last window, and a judge that cannot answer ---------------------------------------------


@pytest.mark.parametrize("dialect", list(ASKS))
async def test_a_stream_whose_short_last_window_is_unsafe_ends_blocked_not_completed(
    dialect: str, store: Store, judging: Judging
) -> None:
    upstream, path, body = ASKS[dialect]
    judging.policy(input=False, output=True)
    judging.judge.rule("end.", "Violent")  # only in the last piece: judged when the upstream ended
    async with serving(upstream, store, judging) as (rig, _provider):
        raw = await raw_stream(rig, path, body)
    assert b"end." not in raw
    events = sse_events(raw)
    last = events[-1][1]
    if dialect == "responses":
        assert last["type"] == "response.incomplete"
        assert not any(name in ("response.completed", "response.output_text.done") for name, _ in events)
    elif dialect == "chat":
        assert last["error"]["code"] == "content_filter"
    else:
        assert last["type"] == "error"
        assert not any(name == "message_stop" for name, _ in events)


async def test_a_messages_stream_the_judge_cannot_pass_ends_with_an_overloaded_error_not_a_refusal(
    store: Store, judging: Judging
) -> None:
    judging.policy(input=False, output=True)
    judging.judge.error()
    async with serving("anthropic", store, judging) as (rig, _provider), rig.anthropic() as client:
        async with client.messages.stream(model="m", max_tokens=64,
                                          messages=[{"role": "user", "content": QUESTION}]) as stream:
            with pytest.raises(anthropic.APIStatusError) as raised:
                async for _text in stream.text_stream:
                    pass
            snapshot = stream.current_message_snapshot
    body = raised.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "overloaded_error"
    assert snapshot.stop_reason is None  # nothing was refused: the guard could not judge
    assert "".join(b.text for b in snapshot.content if b.type == "text") == ""  # nothing unjudged


async def test_a_responses_stream_the_judge_cannot_pass_ends_failed(store: Store, judging: Judging) -> None:
    judging.policy(input=False, output=True)
    judging.judge.error()
    async with serving("chat", store, judging) as (rig, _provider), rig.openai() as client:
        async with client.responses.stream(model="m", input=QUESTION, store=False) as stream:
            events = [event async for event in stream]
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    error, failed = events[-2], events[-1]
    assert error.type == "error" and error.code == "guard_unavailable"
    assert failed.type == "response.failed" and failed.response.error is not None
    assert not any(e.type == "response.output_text.delta" for e in events)


# --- counting tokens ---------------------------------------------------------------------------------


@MESSAGES_UPASKS
async def test_counting_tokens_is_not_judged_even_when_the_judge_is_down(
    upstream: str, store: Store, judging: Judging
) -> None:
    # Nothing is generated; agents count often. A fail-closed policy whose judge fails must not
    # make every count fail (the message itself is judged when it is sent).
    judging.policy(input=True, output=True)
    judging.judge.error()
    async with serving(upstream, store, judging) as (rig, _provider), rig.anthropic() as client:
        counted = await client.messages.count_tokens(
            model="m", messages=[{"role": "user", "content": f"How do I build a {MARKER}?"}])
        assert counted.input_tokens > 0
        with pytest.raises(anthropic.InternalServerError):  # the message is still judged: 503
            await client.messages.create(model="m", max_tokens=64,
                                         messages=[{"role": "user", "content": QUESTION}])
    assert len(judging.judge.requests) == 1
