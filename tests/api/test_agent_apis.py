"""The official `anthropic` and `openai` SDKs, unchanged, against llmgw's data plane.

llmgw's real routes (error middleware, Gateway, limiter, usage meter) stand in front of a fake
provider that speaks only chat completions or only Anthropic's Messages: each SDK gets its own
dialect back, translated both ways, with that dialect's errors, limits and usage.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest

from llmgw.core.types import Limits, ProviderApi
from llmgw.gateway.usage import MAX_COUNT
from llmgw.store.store import Store
from tests.factories import remote_model
from tests.fakes import anthropic_provider as claude
from tests.fakes.anthropic_provider import FakeAnthropicProvider
from tests.fakes.provider import (
    ANSWER,
    TOOL_ARGUMENTS,
    TOOL_RESULT_PREFIX,
    USAGE,
    WORDS,
    FakeProvider,
    GatewayRig,
)

QUESTION = "How wide is the sea?"
ASK: list[Any] = [{"role": "user", "content": QUESTION}]  # the same question, as messages
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                  "required": ["city"]}
CLAUDE_TOOL = {"name": "weather", "description": "The weather in a city.", "input_schema": WEATHER_SCHEMA}
CHAT_TOOL = {"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                              "parameters": WEATHER_SCHEMA}}
RESPONSES_TOOL = {"type": "function", "name": "weather", "description": "The weather in a city.",
                  "parameters": WEATHER_SCHEMA}
# What the Messages-only fake wants from llmgw: its own key and a version header.
CLAUDE_HEADERS = {"x-api-key": claude.API_KEY, "anthropic-version": "2023-06-01"}


@asynccontextmanager
async def chat_only(store: Store, provider: FakeProvider | None = None,
                    **rig: Any) -> AsyncIterator[tuple[GatewayRig, FakeProvider]]:
    """llmgw serving model `m` from a remote provider that speaks only chat completions."""
    fake = await (provider or FakeProvider()).start()
    gw = await GatewayRig(fake, store, model=remote_model("m", api=ProviderApi.OPENAI), **rig).start()
    try:
        yield gw, fake
    finally:
        await gw.close()
        await fake.close()


@asynccontextmanager
async def messages_only(store: Store, **rig: Any) -> AsyncIterator[tuple[GatewayRig, FakeAnthropicProvider]]:
    """llmgw serving model `m` from a remote provider that speaks only Anthropic's Messages."""
    fake = await FakeAnthropicProvider().start()
    gw = await GatewayRig(fake, store, model=remote_model("m", api=ProviderApi.ANTHROPIC),
                          upstream_headers=dict(CLAUDE_HEADERS), **rig).start()
    try:
        yield gw, fake
    finally:
        await gw.close()
        await fake.close()


def text_of(message: anthropic.types.Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


# --- 1. Messages and Responses clients, a provider that speaks only chat completions -----------


async def test_a_message_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, provider), rig.anthropic() as client:
        message = await client.messages.create(
            model="m", max_tokens=64, system="Answer in one sentence.",
            messages=ASK)
    assert text_of(message) == ANSWER
    assert message.role == "assistant" and message.stop_reason == "end_turn"
    # The provider's own count, not an estimate.
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        USAGE["prompt_tokens"], USAGE["completion_tokens"])
    # What the provider was asked: a valid chat completion carrying the system prompt and limit.
    [sent] = provider.requests
    assert sent["model"] == "m" and sent["max_tokens"] == 64
    assert sent["messages"] == [{"role": "system", "content": "Answer in one sentence."},
                                {"role": "user", "content": QUESTION}]


async def test_a_message_stream_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, provider), rig.anthropic() as client:
        async with client.messages.stream(model="m", max_tokens=64,
                                          messages=ASK) as stream:
            deltas = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
    assert len([d for d in deltas if d]) > 1 and "".join(deltas) == ANSWER
    assert text_of(final) == ANSWER and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        USAGE["prompt_tokens"], USAGE["completion_tokens"])
    assert provider.requests[-1]["stream"] is True


async def test_a_tool_round_trip_in_messages_through_a_chat_only_provider(store: Store) -> None:
    question: anthropic.types.MessageParam = {"role": "user", "content": "The weather in Paris?"}
    async with chat_only(store) as (rig, provider), rig.anthropic() as client:
        asked = await client.messages.create(model="m", max_tokens=64, tools=[CLAUDE_TOOL],
                                             messages=[question])
        assert asked.stop_reason == "tool_use"
        [call] = [b for b in asked.content if b.type == "tool_use"]
        assert call.name == "weather" and call.input == TOOL_ARGUMENTS
        answered = await client.messages.create(
            model="m", max_tokens=64, tools=[CLAUDE_TOOL],
            messages=[question, {"role": "assistant", "content": asked.content},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                    "content": "18 degrees"}]}])
    assert text_of(answered) == f"{TOOL_RESULT_PREFIX} 18 degrees"
    assert answered.stop_reason == "end_turn"
    # The provider got chat's tools, and the result as a tool message answering its call.
    first, second = provider.requests
    assert first["tools"] == [CHAT_TOOL]
    call_ids = [c["id"] for c in second["messages"][-2]["tool_calls"]]
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["tool_call_id"] in call_ids


async def test_stop_sequences_reach_a_chat_only_provider_as_stop(store: Store) -> None:
    async with chat_only(store) as (rig, provider), rig.anthropic() as client:
        await client.messages.create(model="m", max_tokens=64, stop_sequences=["wide", "\n\n"],
                                     messages=ASK)
    assert provider.requests[-1]["stop"] == ["wide", "\n\n"]


async def test_a_streamed_tool_call_in_messages_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, _), rig.anthropic() as client:
        async with client.messages.stream(model="m", max_tokens=64, tools=[CLAUDE_TOOL],
                                          messages=[{"role": "user", "content": "Paris weather?"}]) as stream:
            pieces = [e.partial_json async for e in stream if e.type == "input_json"]
            final = await stream.get_final_message()
    # The arguments arrive in pieces, as the provider streamed them, and add up to the call.
    assert len(pieces) > 1 and json.loads("".join(pieces)) == TOOL_ARGUMENTS
    [call] = final.content
    assert call.type == "tool_use" and call.name == "weather" and call.input == TOOL_ARGUMENTS
    assert final.stop_reason == "tool_use"


async def test_a_chat_answer_cut_at_its_limit_is_max_tokens_in_messages(store: Store) -> None:
    cut = FakeProvider(body=b'{"id":"c","object":"chat.completion","created":1,"model":"m",'
                            b'"choices":[{"index":0,"message":{"role":"assistant","content":"The sea"},'
                            b'"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}')
    async with chat_only(store, cut) as (rig, _), rig.anthropic() as client:
        message = await client.messages.create(model="m", max_tokens=2,
                                               messages=ASK)
    assert text_of(message) == "The sea" and message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 2


@pytest.mark.parametrize("choice, sent", [
    ({"type": "any"}, "required"),
    ({"type": "tool", "name": "weather"}, {"type": "function", "function": {"name": "weather"}}),
    ({"type": "none"}, "none"),
])
async def test_tool_choice_reaches_a_chat_only_provider_in_chats_terms(
    store: Store, choice: dict[str, str], sent: Any,
) -> None:
    async with chat_only(store) as (rig, provider), rig.anthropic() as client:
        message = await client.messages.create(model="m", max_tokens=64, tools=[CLAUDE_TOOL],
                                               tool_choice=choice,
                                               messages=[{"role": "user", "content": "Paris weather?"}])
    assert provider.requests[-1]["tool_choice"] == sent
    assert message.stop_reason == ("end_turn" if choice["type"] == "none" else "tool_use")


async def test_count_tokens_on_a_chat_only_provider_is_llmgws_estimate(store: Store) -> None:
    sent: list[bytes] = []

    async def record(request: httpx2.Request) -> None:
        sent.append(request.content)

    async with chat_only(store) as (rig, provider):
        client = anthropic.AsyncAnthropic(
            base_url=rig.url, api_key=rig.plaintext, max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [record]}))
        async with client:
            counted = await client.messages.count_tokens(
                model="m", system="Be brief.", messages=ASK)
    # About one token per 4 bytes of what the client sent; the provider was not asked.
    [body] = sent
    assert counted.input_tokens == math.ceil(len(body) / 4)
    assert provider.requests == []


async def test_a_response_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, provider), rig.openai() as client:
        response = await client.responses.create(model="m", input=QUESTION,
                                                 instructions="Answer in one sentence.",
                                                 max_output_tokens=64)
    assert response.output_text == ANSWER and response.status == "completed"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (
        USAGE["prompt_tokens"], USAGE["completion_tokens"])
    [sent] = provider.requests
    assert sent["messages"] == [{"role": "system", "content": "Answer in one sentence."},
                                {"role": "user", "content": QUESTION}]


async def test_a_response_stream_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, _), rig.openai() as client:
        async with client.responses.stream(model="m", input=QUESTION) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert len(deltas) > 1 and "".join(deltas) == ANSWER
    assert final.output_text == ANSWER and final.status == "completed"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        USAGE["prompt_tokens"], USAGE["completion_tokens"])


async def test_a_function_tool_round_trip_in_responses_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, provider), rig.openai() as client:
        asked = await client.responses.create(model="m", input="The weather in Paris?",
                                              tools=[RESPONSES_TOOL])
        [call] = [item for item in asked.output if item.type == "function_call"]
        assert call.name == "weather" and json.loads(call.arguments) == TOOL_ARGUMENTS
        answered = await client.responses.create(
            model="m", tools=[RESPONSES_TOOL],
            input=[{"role": "user", "content": "The weather in Paris?"},
                   {"type": "function_call", "call_id": call.call_id, "name": call.name,
                    "arguments": call.arguments},
                   {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees"}])
    assert answered.output_text == f"{TOOL_RESULT_PREFIX} 18 degrees"
    first, second = provider.requests
    assert first["tools"] == [CHAT_TOOL]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "18 degrees"}


async def test_a_streamed_function_call_in_responses_through_a_chat_only_provider(store: Store) -> None:
    async with chat_only(store) as (rig, _), rig.openai() as client:
        async with client.responses.stream(model="m", input="Paris weather?",
                                           tools=[RESPONSES_TOOL]) as stream:
            pieces = [e.delta async for e in stream if e.type == "response.function_call_arguments.delta"]
            final = await stream.get_final_response()
    assert len(pieces) > 1 and json.loads("".join(pieces)) == TOOL_ARGUMENTS
    [call] = final.output
    assert call.type == "function_call" and call.name == "weather"
    assert json.loads(call.arguments) == TOOL_ARGUMENTS and final.status == "completed"


@pytest.mark.parametrize("field, value", [("previous_response_id", "resp_123"), ("store", True)])
async def test_stored_responses_are_refused_naming_the_field(store: Store, field: str, value: Any) -> None:
    async with chat_only(store) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="m", input=QUESTION, **{field: value})
    assert refused.value.status_code == 400 and refused.value.param == field
    assert field in refused.value.message
    assert provider.requests == []  # never a silent drop


# --- 2. chat completions and Responses clients, a provider that speaks only Messages -----------


async def test_a_chat_completion_through_a_messages_only_provider(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": QUESTION}])
    assert completion.choices[0].message.content == claude.ANSWER
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        claude.INPUT_TOKENS, provider.usages[-1]["output_tokens"])
    [sent] = provider.requests
    # Messages requires max_tokens even though the chat client sent none.
    assert isinstance(sent["max_tokens"], int) and sent["max_tokens"] > 0
    assert sent["system"] == "Be brief." and sent["messages"] == [{"role": "user", "content": QUESTION}]


async def test_a_chat_stream_through_a_messages_only_provider(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        stream = await client.chat.completions.create(
            model="m", messages=ASK, stream=True,
            stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) > 1 and "".join(deltas) == claude.ANSWER
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == ["stop"]
    [usage] = [c.usage for c in chunks if c.usage is not None]
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        claude.INPUT_TOKENS, provider.usages[-1]["output_tokens"])


async def test_a_chat_tool_round_trip_through_a_messages_only_provider(store: Store) -> None:
    question: openai.types.chat.ChatCompletionMessageParam = {"role": "user", "content": "Paris weather?"}
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        asked = await client.chat.completions.create(model="m", messages=[question],
                                                     tools=[CHAT_TOOL])
        choice = asked.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls is not None
        [call] = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "weather"
        assert json.loads(call.function.arguments) == claude.TOOL_INPUT
        answered = await client.chat.completions.create(
            model="m", tools=[CHAT_TOOL],
            messages=[question, choice.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": "18 degrees"}])
    assert answered.choices[0].message.content == f"{claude.TOOL_RESULT_PREFIX} 18 degrees"
    # The provider got Anthropic's tools, and a tool_result answering its own tool_use.
    first, second = provider.requests
    assert first["tools"] == [CLAUDE_TOOL]
    assert all(isinstance(r["max_tokens"], int) for r in provider.requests)
    [use] = [b for b in second["messages"][-2]["content"] if b["type"] == "tool_use"]
    [result] = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert second["messages"][-1]["role"] == "user" and result["tool_use_id"] == use["id"]


async def test_a_message_to_a_messages_only_provider_passes_through_with_its_own_key(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.anthropic() as client:
        message = await client.messages.create(model="m", max_tokens=3,
                                               messages=ASK)
    # Natively: the provider's own cut at max_tokens and its own usage, untouched.
    assert text_of(message) == "".join(claude.WORDS[:3]) and message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3 and message.usage.input_tokens == claude.INPUT_TOKENS
    # The fake takes its own key only: the client's llmgw key did not travel upstream.
    assert provider.credentials == ["x-api-key"] and rig.plaintext != claude.API_KEY


async def test_a_message_from_an_engine_that_names_it_as_a_chat_completion_has_anthropics_id(
    store: Store,
) -> None:
    # A local model: its engine (llama-server) answers Messages itself, with `chatcmpl-…` ids.
    engine = await FakeAnthropicProvider(id_prefix="chatcmpl-").start()
    rig = await GatewayRig(engine, store, upstream_headers=dict(CLAUDE_HEADERS)).start()
    try:
        async with rig.anthropic() as client:
            whole = await client.messages.create(model="m", max_tokens=64, messages=ASK)
            async with client.messages.stream(model="m", max_tokens=64, messages=ASK) as stream:
                started = [e.message.id async for e in stream if e.type == "message_start"]
                final = await stream.get_final_message()
    finally:
        await rig.close()
        await engine.close()
    assert (whole.id, started, final.id) == ("msg_0", ["msg_1"], "msg_1")
    assert text_of(whole) == text_of(final) == claude.ANSWER


async def test_a_response_through_a_messages_only_provider_takes_two_translations(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        response = await client.responses.create(model="m", input=QUESTION, instructions="Be brief.")
        async with client.responses.stream(model="m", input=QUESTION) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert response.output_text == claude.ANSWER and response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (
        claude.INPUT_TOKENS, provider.usages[0]["output_tokens"])
    assert len(deltas) > 1 and final.output_text == "".join(deltas) == claude.ANSWER
    assert provider.requests[0]["system"] == "Be brief."
    assert all(isinstance(r["max_tokens"], int) for r in provider.requests)


async def test_chat_stop_and_token_limits_are_honoured_by_a_messages_only_provider(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        stopped = await client.chat.completions.create(model="m", messages=ASK, stop=["wide"])
        sent_stop = provider.requests[-1]
        cut = await client.chat.completions.create(model="m", messages=ASK, max_tokens=3)
        sent_cut = provider.requests[-1]
        response = await client.responses.create(model="m", input=QUESTION, max_output_tokens=3)
    assert sent_stop["stop_sequences"] == ["wide"]
    assert (stopped.choices[0].message.content, stopped.choices[0].finish_reason) == ("The sea is ", "stop")
    assert sent_cut["max_tokens"] == 3
    assert (cut.choices[0].message.content, cut.choices[0].finish_reason) == ("The sea is", "length")
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens" and response.output_text == "The sea is"


@pytest.mark.parametrize("field, value", [("n", 2), ("logprobs", True)])
async def test_chat_fields_messages_cannot_carry_are_a_400_naming_them(
    store: Store, field: str, value: Any,
) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="m", messages=ASK,
                                                 **{field: value})
    assert refused.value.param == field and "cannot be carried" in refused.value.message
    assert provider.requests == []


async def test_count_tokens_on_a_messages_only_provider_is_the_providers_count(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.anthropic() as client:
        counted = await client.messages.count_tokens(model="m", system="Be brief.",
                                                     messages=ASK)
    [body] = provider.counted
    assert counted.input_tokens == claude.count_tokens(body) and body["system"] == "Be brief."


async def test_completions_and_embeddings_on_a_messages_only_provider_are_a_clear_400(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as completions:
            await client.completions.create(model="m", prompt=QUESTION)
        with pytest.raises(openai.BadRequestError) as embeddings:
            await client.embeddings.create(model="m", input=QUESTION)
    for refused in (completions.value, embeddings.value):
        assert refused.param == "model" and "anthropic" in refused.message
    assert provider.requests == []


# --- 3. errors in each dialect's shape ----------------------------------------------------------


def anthropic_error(exc: anthropic.APIStatusError, type_: str) -> str:
    """The error's message, once its body is Anthropic's shape with `type_`."""
    body = exc.response.json()
    assert body["type"] == "error" and body["error"]["type"] == type_, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return str(body["error"]["message"])


async def test_a_bad_key_on_messages_is_anthropics_401(store: Store) -> None:
    async with chat_only(store) as (rig, provider):
        async with anthropic.AsyncAnthropic(base_url=rig.url, api_key="sk-wrong", max_retries=0) as client:
            with pytest.raises(anthropic.AuthenticationError) as refused:
                await client.messages.create(model="m", max_tokens=8,
                                             messages=ASK)
    assert refused.value.status_code == 401
    anthropic_error(refused.value, "authentication_error")
    assert provider.requests == []


async def test_a_key_in_x_api_key_alone_or_as_a_bearer_token_is_accepted(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # else the SDK would send it as x-api-key
    async with chat_only(store) as (rig, _):
        async with aiohttp.ClientSession() as http:
            resp = await http.post(rig.url + "/v1/messages", headers={"x-api-key": rig.plaintext},
                                   json={"model": "m", "max_tokens": 8, "messages": ASK})
            assert resp.status == 200
            body = await resp.json()
        # As Claude Code sends ANTHROPIC_AUTH_TOKEN: `Authorization: Bearer`, no x-api-key.
        async with anthropic.AsyncAnthropic(base_url=rig.url, auth_token=rig.plaintext,
                                            max_retries=0) as bearer:
            message = await bearer.messages.create(model="m", max_tokens=8, messages=ASK)
    assert body["type"] == "message" and body["content"] == [{"type": "text", "text": ANSWER}]
    assert text_of(message) == ANSWER


async def test_an_unknown_model_on_messages_is_anthropics_404(store: Store) -> None:
    async with chat_only(store) as (rig, _), rig.anthropic() as client:
        with pytest.raises(anthropic.NotFoundError) as refused:
            await client.messages.create(model="nope", max_tokens=8,
                                         messages=ASK)
    assert "nope" in anthropic_error(refused.value, "not_found_error")


async def test_a_message_without_max_tokens_is_anthropics_400_naming_it(store: Store) -> None:
    async with chat_only(store) as (rig, provider), rig.anthropic() as client:
        # The SDK's typed method insists on max_tokens itself; its raw post lets the request through.
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.post("/v1/messages", cast_to=object,
                              body={"model": "m", "messages": [{"role": "user", "content": QUESTION}]})
    assert "max_tokens" in anthropic_error(refused.value, "invalid_request_error")
    assert provider.requests == []


async def test_a_key_over_its_request_rate_gets_anthropics_429_with_retry_after(store: Store) -> None:
    async with chat_only(store, limits=Limits(rpm=1)) as (rig, provider), rig.anthropic() as client:
        await client.messages.create(model="m", max_tokens=8,
                                     messages=ASK)
        with pytest.raises(anthropic.RateLimitError) as refused:
            await client.messages.create(model="m", max_tokens=8,
                                         messages=ASK)
    anthropic_error(refused.value, "rate_limit_error")
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert len(provider.requests) == 1


async def test_a_spent_daily_token_budget_is_anthropics_429(store: Store) -> None:
    budget = 2 * (USAGE["prompt_tokens"] + USAGE["completion_tokens"])
    async with chat_only(store, limits=Limits(tokens_per_day=budget)) as (rig, provider), \
            rig.anthropic() as client:
        for _ in range(2):
            await client.messages.create(model="m", max_tokens=5, messages=ASK)
        with pytest.raises(anthropic.RateLimitError) as refused:
            await client.messages.create(model="m", max_tokens=5, messages=ASK)
    assert f"its {budget} tokens for today" in anthropic_error(refused.value, "rate_limit_error")
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert len(provider.requests) == 2


async def test_a_provider_that_is_down_is_anthropics_5xx(store: Store) -> None:
    provider = await FakeProvider().start()
    rig = await GatewayRig(provider, store, model=remote_model("m", api=ProviderApi.OPENAI)).start()
    await provider.close()  # its port is now dead
    try:
        async with rig.anthropic() as client:
            with pytest.raises(anthropic.InternalServerError) as failed:
                await client.messages.create(model="m", max_tokens=8,
                                             messages=ASK)
    finally:
        await rig.close()
    assert failed.value.status_code >= 500
    anthropic_error(failed.value, "api_error")


@pytest.mark.parametrize("status, error, type_", [
    (429, anthropic.RateLimitError, "rate_limit_error"),
    (400, anthropic.BadRequestError, "invalid_request_error"),
    (500, anthropic.InternalServerError, "api_error"),
])
async def test_a_chat_providers_error_is_anthropics_shape_without_its_body(
    store: Store, status: int, error: type[anthropic.APIStatusError], type_: str,
) -> None:
    failing = FakeProvider(status=status, error_body=b'{"error":{"message":"sk-upstream-secret is wrong"}}',
                           error_headers={"Content-Type": "application/json", "Retry-After": "7"})
    async with chat_only(store, failing) as (rig, _), rig.anthropic() as client:
        with pytest.raises(error) as whole:
            await client.messages.create(model="m", max_tokens=8, messages=ASK)
        with pytest.raises(error) as streamed:
            async with client.messages.stream(model="m", max_tokens=8, messages=ASK) as stream:
                await stream.get_final_message()
    for exc in (whole.value, streamed.value):
        assert "secret" not in anthropic_error(exc, type_)
        if status == 429:  # the provider's wait, passed on so the SDK waits as long
            assert exc.response.headers["retry-after"] == "7"


async def test_a_messages_providers_rate_limit_is_openais_429_for_openai_clients(store: Store) -> None:
    async with messages_only(store) as (rig, provider), rig.openai() as client:
        provider.status = 429
        with pytest.raises(openai.RateLimitError) as chat:
            await client.chat.completions.create(model="m", messages=ASK)
        with pytest.raises(openai.RateLimitError) as responses:
            await client.responses.create(model="m", input=QUESTION)
    for exc in (chat.value, responses.value):
        body = exc.response.json()
        assert set(body) == {"error"} and body["error"]["type"] == "rate_limit_error", body


async def test_errors_on_responses_are_openais_shape(store: Store) -> None:
    async with chat_only(store) as (rig, _):
        async with openai.AsyncOpenAI(base_url=rig.url + "/v1", api_key="sk-wrong", max_retries=0) as bad:
            with pytest.raises(openai.AuthenticationError) as unauthorized:
                await bad.responses.create(model="m", input=QUESTION)
        async with rig.openai() as client:
            with pytest.raises(openai.NotFoundError) as unknown:
                await client.responses.create(model="nope", input=QUESTION)
            with pytest.raises(openai.BadRequestError) as malformed:
                await client.responses.create(model="m", input=QUESTION, max_output_tokens=-1)
    for exc in (unauthorized.value, unknown.value, malformed.value):
        body = exc.response.json()
        assert set(body) == {"error"} and isinstance(body["error"]["message"], str), body
    assert unknown.value.param == "model"
    assert malformed.value.param == "max_output_tokens"


async def test_models_in_anthropics_shape_for_the_anthropic_sdk(store: Store) -> None:
    async with chat_only(store) as (rig, _), rig.anthropic() as client:
        page = await client.models.list()
    assert [(m.id, m.type) for m in page.data] == [("m", "model")]


# --- 4. limits and usage under concurrency, in each dialect --------------------------------------


async def counted_by_chat(client: openai.AsyncOpenAI, i: int) -> tuple[int, int]:
    """One chat completion (whole, streamed, or a tool call by turns) and the usage it reported."""
    kwargs: dict[str, Any] = {"tools": [CHAT_TOOL]} if i % 3 == 2 else {}
    messages: list[Any] = [{"role": "user", "content": f"{QUESTION} ({i})"}]
    if i % 2:
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True,
                                                      stream_options={"include_usage": True}, **kwargs)
        [usage] = [c.usage async for c in stream if c.usage is not None]
    else:
        usage = (await client.chat.completions.create(model="m", messages=messages, **kwargs)).usage
    assert usage is not None
    return usage.prompt_tokens, usage.completion_tokens


async def counted_by_messages(client: anthropic.AsyncAnthropic, i: int) -> tuple[int, int]:
    """One message (whole or streamed, sometimes a tool call) and the usage it reported."""
    kwargs: dict[str, Any] = {"tools": [CLAUDE_TOOL]} if i % 3 == 2 else {}
    messages: list[Any] = [{"role": "user", "content": f"{QUESTION} ({i})"}]
    if i % 2:
        async with client.messages.stream(model="m", max_tokens=64, messages=messages, **kwargs) as stream:
            message = await stream.get_final_message()
    else:
        message = await client.messages.create(model="m", max_tokens=64, messages=messages, **kwargs)
    return message.usage.input_tokens, message.usage.output_tokens


async def counted_by_responses(client: openai.AsyncOpenAI, i: int) -> tuple[int, int]:
    """One response (whole or streamed, sometimes a function call) and the usage it reported."""
    kwargs: dict[str, Any] = {"tools": [RESPONSES_TOOL]} if i % 3 == 2 else {}
    if i % 2:
        async with client.responses.stream(model="m", input=f"{QUESTION} ({i})", **kwargs) as stream:
            response = await stream.get_final_response()
    else:
        response = await client.responses.create(model="m", input=f"{QUESTION} ({i})", **kwargs)
    assert response.usage is not None
    return response.usage.input_tokens, response.usage.output_tokens


@asynccontextmanager
async def provider_speaking(kind: str, store: Store, **rig: Any) -> AsyncIterator[GatewayRig]:
    if kind == "chat":
        async with chat_only(store, **rig) as (gw, _):
            yield gw
    else:
        async with messages_only(store, **rig) as (gw, _):
            yield gw


@pytest.mark.parametrize("upstream", ["chat", "messages"])
async def test_usage_after_concurrent_requests_equals_what_each_dialects_clients_counted(
    store: Store, upstream: str,
) -> None:
    n = 9
    async with provider_speaking(upstream, store, limits=Limits(tokens_per_day=1_000_000)) as rig, \
            rig.openai() as oa, rig.anthropic() as an:
        assert rig.meter is not None and rig.limiter is not None
        before = (0, 0, 0)
        for dialect in ("chat", "messages", "responses"):
            if dialect == "chat":
                counted = await asyncio.gather(*(counted_by_chat(oa, i) for i in range(n)))
            elif dialect == "messages":
                counted = await asyncio.gather(*(counted_by_messages(an, i) for i in range(n)))
            else:
                counted = await asyncio.gather(*(counted_by_responses(oa, i) for i in range(n)))
            await rig.limiter.sync(rig.meter.flush)
            [row] = store.usage.usage()
            now = (row.requests, row.prompt_tokens, row.completion_tokens)
            # What this dialect's burst added is exactly what its clients read in their answers.
            assert (now[0] - before[0], now[1] - before[1], now[2] - before[2]) == (
                n, sum(p for p, _ in counted), sum(c for _, c in counted)), dialect
            assert row.errors == 0 and row.blocked == 0
            before = now


@pytest.mark.parametrize("upstream", ["chat", "messages"])
async def test_counting_tokens_costs_a_request_but_no_tokens(store: Store, upstream: str) -> None:
    async with provider_speaking(upstream, store, limits=Limits(rpm=2)) as rig, rig.anthropic() as client:
        for _ in range(2):
            await client.messages.count_tokens(model="m", messages=ASK)
        with pytest.raises(anthropic.RateLimitError) as refused:
            await client.messages.count_tokens(model="m", messages=ASK)
        assert rig.meter is not None and rig.limiter is not None
        await rig.limiter.sync(rig.meter.flush)
    anthropic_error(refused.value, "rate_limit_error")
    [row] = store.usage.usage()
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (2, 0, 0)


async def test_a_request_rate_admits_exactly_its_limit_of_a_concurrent_burst_of_messages(
    store: Store,
) -> None:
    limit, burst = 4, 12
    async with chat_only(store, limits=Limits(rpm=limit)) as (rig, provider), rig.anthropic() as client:
        results = await asyncio.gather(*(
            client.messages.create(model="m", max_tokens=8, messages=ASK)
            for _ in range(burst)), return_exceptions=True)
    answered = [r for r in results if isinstance(r, anthropic.types.Message)]
    refused = [r for r in results if isinstance(r, anthropic.RateLimitError)]
    assert (len(answered), len(refused)) == (limit, burst - limit), results
    assert len(provider.requests) == limit
    for exc in refused:
        anthropic_error(exc, "rate_limit_error")
        assert int(exc.response.headers["retry-after"]) >= 1


# --- 5. an upstream that lies about usage -------------------------------------------------------


LIE = b'{"prompt_tokens":100000000000000000000,"completion_tokens":-4}'


async def test_absurd_usage_behind_a_messages_client_is_clamped_as_for_chat(store: Store) -> None:
    async with chat_only(store, FakeProvider(usage=LIE)) as (rig, _), rig.anthropic() as client:
        message = await client.messages.create(model="m", max_tokens=64,
                                               messages=ASK)
        async with client.messages.stream(model="m", max_tokens=64,
                                          messages=ASK) as stream:
            streamed = await stream.get_final_message()
        assert rig.meter is not None and rig.limiter is not None
        await rig.limiter.sync(rig.meter.flush)
    assert text_of(message) == text_of(streamed) == ANSWER
    # The client is not shown the lie; the meter counts the prompt as MAX_COUNT tokens each time
    # (it still hits the key's budget) and the negative completion as an estimate: a whole
    # answer's text at 4 bytes a token, a stream's text deltas one token each.
    for usage in (message.usage, streamed.usage):
        assert 0 <= usage.input_tokens <= MAX_COUNT and usage.output_tokens >= 0
    [row] = store.usage.usage()
    assert (row.requests, row.errors) == (2, 0)
    assert row.prompt_tokens == 2 * MAX_COUNT
    assert row.completion_tokens == math.ceil(len(ANSWER) / 4) + len(WORDS)  # whole; one per delta


async def test_absurd_usage_behind_a_responses_client_still_answers_and_is_clamped(store: Store) -> None:
    async with chat_only(store, FakeProvider(usage=LIE)) as (rig, _), rig.openai() as client:
        response = await client.responses.create(model="m", input=QUESTION)
        async with client.responses.stream(model="m", input=QUESTION) as stream:
            streamed = await stream.get_final_response()
        assert rig.meter is not None and rig.limiter is not None
        await rig.limiter.sync(rig.meter.flush)
    assert response.output_text == streamed.output_text == ANSWER
    for usage in (response.usage, streamed.usage):
        assert usage is not None and 0 <= usage.input_tokens <= MAX_COUNT and usage.output_tokens >= 0
    [row] = store.usage.usage()
    assert (row.requests, row.errors) == (2, 0)
    assert row.prompt_tokens == 2 * MAX_COUNT
    assert row.completion_tokens == math.ceil(len(ANSWER) / 4) + len(WORDS)  # whole; one per delta
