"""The fake chat-completions provider's tool calls and usage chunk, checked with the `openai` SDK:
translation tests lean on it answering as OpenAI-compatible providers do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from tests.fakes.provider import ANSWER, TOOL_ARGUMENTS, USAGE, WORDS, FakeProvider

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER: ChatCompletionToolParam = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture
async def client() -> AsyncIterator[tuple[FakeProvider, openai.AsyncOpenAI]]:
    provider = await FakeProvider().start()
    async with openai.AsyncOpenAI(base_url=provider.url, api_key="k", max_retries=0) as c:
        yield provider, c
    await provider.close()


async def test_offered_tools_it_calls_the_first_whole(
    client: tuple[FakeProvider, openai.AsyncOpenAI],
) -> None:
    provider, c = client
    resp = await c.chat.completions.create(model="m", messages=HELLO, tools=[WEATHER])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == TOOL_ARGUMENTS
    assert provider.requests[0]["tools"] == [WEATHER]


async def test_a_streamed_call_arrives_in_argument_pieces(
    client: tuple[FakeProvider, openai.AsyncOpenAI],
) -> None:
    _, c = client
    pieces, names, finish = [], [], None
    async for chunk in await c.chat.completions.create(model="m", messages=HELLO, tools=[WEATHER],
                                                       stream=True):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                assert call.index == 0
                names += [call.function.name] if call.function and call.function.name else []
                pieces += [call.function.arguments] if call.function and call.function.arguments else []
            finish = choice.finish_reason or finish
    assert names == ["get_weather"] and finish == "tool_calls"
    assert len(pieces) > 1 and json.loads("".join(pieces)) == TOOL_ARGUMENTS


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tools_result_is_quoted_back(
    client: tuple[FakeProvider, openai.AsyncOpenAI], stream: bool
) -> None:
    _, c = client
    follow: list[ChatCompletionMessageParam] = [
        *HELLO,
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(TOOL_ARGUMENTS)}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"},
    ]
    if stream:
        text = "".join([ch.choices[0].delta.content or "" async for ch in await c.chat.completions.create(
            model="m", messages=follow, tools=[WEATHER], stream=True) if ch.choices])
    else:
        resp = await c.chat.completions.create(model="m", messages=follow, tools=[WEATHER])
        text = resp.choices[0].message.content or ""
    assert text == "The tool said: 18 degrees"


async def test_include_usage_puts_usage_in_a_last_chunk_without_choices(
    client: tuple[FakeProvider, openai.AsyncOpenAI],
) -> None:
    _, c = client
    chunks = [ch async for ch in await c.chat.completions.create(
        model="m", messages=HELLO, stream=True, stream_options={"include_usage": True})]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == ANSWER
    assert [ch.usage is not None for ch in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_none=True) == USAGE


async def test_without_include_usage_usage_rides_on_the_finishing_chunk(
    client: tuple[FakeProvider, openai.AsyncOpenAI],
) -> None:
    # Some providers send it so whether asked or not; llmgw's usage reader copes with both.
    _, c = client
    chunks: list[Any] = [ch async for ch in await c.chat.completions.create(
        model="m", messages=HELLO, stream=True)]
    assert len(chunks) == len(WORDS) + 2
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.total_tokens == 14
