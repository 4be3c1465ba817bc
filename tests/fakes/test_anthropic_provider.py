"""The fake Anthropic provider, checked with the official `anthropic` SDK: it must answer as the
real API does, or the translation tests built on it prove nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import pytest
from anthropic.types import Message, MessageParam, ToolParam

from tests.fakes.anthropic_provider import (
    ANSWER,
    API_KEY,
    INPUT_TOKENS,
    TOOL_INPUT,
    WORDS,
    FakeAnthropicProvider,
    count_tokens,
)

HELLO: list[MessageParam] = [{"role": "user", "content": "Is the sea wide?"}]
WEATHER: ToolParam = {"name": "get_weather", "description": "The weather in a city.",
                      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.fixture
async def provider() -> AsyncIterator[FakeAnthropicProvider]:
    p = await FakeAnthropicProvider().start()
    yield p
    await p.close()


def sdk(provider: FakeAnthropicProvider, key: str = API_KEY) -> anthropic.AsyncAnthropic:
    # The SDK appends /v1/messages to its base URL; llmgw is given the URL with /v1.
    return anthropic.AsyncAnthropic(base_url=provider.url.removesuffix("/v1"), api_key=key,
                                    max_retries=0, timeout=30)


async def test_a_whole_message_answers_the_fixed_text_with_its_usage(
    provider: FakeAnthropicProvider,
) -> None:
    async with sdk(provider) as client:
        msg = await client.messages.create(model="claude-x", max_tokens=100, messages=HELLO,
                                           system="Be brief.")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == ANSWER  # type: ignore[union-attr]
    assert (msg.stop_reason, msg.model) == ("end_turn", "claude-x")
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (INPUT_TOKENS, len(WORDS))
    assert provider.usages == [{"input_tokens": INPUT_TOKENS, "output_tokens": len(WORDS)}]
    assert provider.requests[0]["system"] == "Be brief." and provider.requests[0]["messages"] == HELLO
    assert provider.versions == [anthropic._constants.ANTHROPIC_API_VERSION]


async def test_a_stream_sends_a_delta_per_word_in_anthropics_event_order(
    provider: FakeAnthropicProvider,
) -> None:
    async with sdk(provider) as client:
        events = [e async for e in await client.messages.create(
            model="m", max_tokens=100, messages=HELLO, stream=True)]
        async with client.messages.stream(model="m", max_tokens=100, messages=HELLO) as stream:
            deltas = [t async for t in stream.text_stream]
            final = await stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds == ["message_start", "content_block_start", *["content_block_delta"] * len(WORDS),
                     "content_block_stop", "message_delta", "message_stop"]
    assert deltas == WORDS
    assert final.content[0].text == ANSWER and final.stop_reason == "end_turn"  # type: ignore[union-attr]
    assert final.usage.output_tokens == len(WORDS) and final.usage.input_tokens == INPUT_TOKENS


async def post(provider: FakeAnthropicProvider, path: str, body: Any,
               headers: dict[str, str] | None = None) -> tuple[aiohttp.ClientResponse, str]:
    """A request as llmgw sends it (x-api-key, the version it names) unless `headers` say otherwise."""
    sent = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"} if headers is None else headers
    async with aiohttp.ClientSession() as session, \
            session.post(provider.url + path, json=body, headers=sent) as resp:
        return resp, await resp.text()


async def test_the_raw_stream_pings_early(provider: FakeAnthropicProvider) -> None:
    # The SDK drops pings, so they are read off the wire.
    body = {"model": "m", "max_tokens": 10, "messages": HELLO, "stream": True}
    resp, text = await post(provider, "/messages", body)
    names = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert (provider.credentials, provider.versions) == (["x-api-key"], ["2023-06-01"])


async def test_a_provider_told_so_takes_the_key_in_x_api_key_only(provider: FakeAnthropicProvider) -> None:
    provider.bearer_ok = False
    body = {"model": "m", "max_tokens": 10, "messages": HELLO}
    resp, text = await post(provider, "/messages", body, {"Authorization": f"Bearer {API_KEY}",
                                                          "anthropic-version": "2023-06-01"})
    assert resp.status == 401 and "authentication_error" in text
    resp, _ = await post(provider, "/messages", body)
    assert resp.status == 200 and provider.credentials == ["x-api-key"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_round_trip(provider: FakeAnthropicProvider, stream: bool) -> None:
    provider.preamble = "Let me look."
    asked: Message
    async with sdk(provider) as client:
        if stream:
            async with client.messages.stream(model="m", max_tokens=100, messages=HELLO,
                                              tools=[WEATHER]) as s:
                asked = await s.get_final_message()
        else:
            asked = await client.messages.create(model="m", max_tokens=100, messages=HELLO,
                                                 tools=[WEATHER])
        assert asked.stop_reason == "tool_use"
        text, call = asked.content
        assert text.type == "text" and text.text == "Let me look."
        assert call.type == "tool_use" and call.name == "get_weather" and call.input == TOOL_INPUT
        follow: list[MessageParam] = [
            *HELLO, {"role": "assistant", "content": asked.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": [{"type": "text", "text": "18 degrees"}]}]},
        ]
        answer = await client.messages.create(model="m", max_tokens=100, messages=follow,
                                              tools=[WEATHER])
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].text == "The tool said: 18 degrees"  # type: ignore[union-attr]
    assert provider.requests[-1]["messages"][-1]["content"][0]["tool_use_id"] == call.id


async def test_a_tool_result_must_answer_a_tool_use(provider: FakeAnthropicProvider) -> None:
    stray: list[MessageParam] = [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "18 degrees"}]}]
    async with sdk(provider) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model="m", max_tokens=10, messages=stray, tools=[WEATHER])
    assert "tool_use_id" in caught.value.message and provider.requests == []


@pytest.mark.parametrize("stream", [False, True])
async def test_stop_sequences_cut_the_fixed_text(provider: FakeAnthropicProvider, stream: bool) -> None:
    msg: Message
    async with sdk(provider) as client:
        if stream:
            async with client.messages.stream(model="m", max_tokens=100, messages=HELLO,
                                              stop_sequences=["wide", " is"]) as s:
                msg = await s.get_final_message()
        else:
            msg = await client.messages.create(model="m", max_tokens=100, messages=HELLO,
                                               stop_sequences=["wide", " is"])
    assert msg.content[0].text == "The sea"  # type: ignore[union-attr]
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", " is")
    assert msg.usage.output_tokens == 2


async def test_max_tokens_cuts_the_answer(provider: FakeAnthropicProvider) -> None:
    async with sdk(provider) as client:
        msg = await client.messages.create(model="m", max_tokens=2, messages=HELLO)
    assert msg.content[0].text == "The sea" and msg.stop_reason == "max_tokens"  # type: ignore[union-attr]


async def test_count_tokens_is_deterministic(provider: FakeAnthropicProvider) -> None:
    async with sdk(provider) as client:
        counted = await client.messages.count_tokens(model="m", messages=HELLO, system="Be brief.")
    assert counted.input_tokens == count_tokens({"system": "Be brief.", "messages": HELLO}) == 7
    assert provider.counted == [{"model": "m", "messages": HELLO, "system": "Be brief."}]


async def test_a_wrong_key_is_anthropics_401(provider: FakeAnthropicProvider) -> None:
    async with sdk(provider, key="sk-ant-wrong") as client:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await client.messages.create(model="m", max_tokens=10, messages=HELLO)
    assert caught.value.status_code == 401
    assert caught.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                            "message": "invalid x-api-key"}}
    assert provider.requests == []


@pytest.mark.parametrize(("headers", "fragment"), [
    ({}, "header is required"),
    ({"anthropic-version": "2023-06-01, 2023-06-01"}, "not a valid version"),
])
async def test_the_version_header_must_be_there_once(
    provider: FakeAnthropicProvider, headers: dict[str, str], fragment: str
) -> None:
    body = {"model": "m", "max_tokens": 10, "messages": HELLO}
    resp, text = await post(provider, "/messages", body, {"x-api-key": API_KEY, **headers})
    answer = json.loads(text)
    assert resp.status == 400 and answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error" and fragment in answer["error"]["message"]


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"stream_options": {"include_usage": True}}, "stream_options"),  # an OpenAI field left in
    ({"messages": [{"role": "system", "content": "Be brief."}]}, "messages.0.role"),
    ({"max_tokens": None}, "max_tokens"),
])
async def test_what_anthropic_refuses_is_refused(
    provider: FakeAnthropicProvider, extra: dict[str, Any], fragment: str
) -> None:
    async with sdk(provider) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model="m", max_tokens=10, messages=HELLO, extra_body=extra)
    assert fragment in caught.value.message


async def test_it_speaks_no_chat_completions(provider: FakeAnthropicProvider) -> None:
    resp, text = await post(provider, "/chat/completions", {"model": "m", "messages": HELLO},
                            {"Authorization": f"Bearer {API_KEY}"})
    assert resp.status == 404 and json.loads(text)["error"]["type"] == "not_found_error"


async def test_a_failing_provider_answers_anthropics_error_for_the_status(
    provider: FakeAnthropicProvider,
) -> None:
    provider.status = 529
    async with sdk(provider) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(model="m", max_tokens=10, messages=HELLO)
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
