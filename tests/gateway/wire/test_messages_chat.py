"""Messages ⇄ chat completions: requests, whole answers and streams, checked against the official
SDKs' own types and stream accumulators."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire.messages_chat import (
    DEFAULT_MAX_TOKENS,
    UNPARSED_ARGUMENTS,
    ChatStreamAsMessages,
    MessageIdStream,
    MessagesStreamAsChat,
    chat_answer_as_message,
    chat_to_messages,
    message_answer_as_chat,
    messages_to_chat,
    renamed_message,
)
from llmgw.gateway.wire.sse import SseSplitter
from tests.gateway.wire.test_anthropic_messages import STREAM as LLAMA_STREAM
from tests.gateway.wire.test_anthropic_messages import WHOLE as LLAMA_WHOLE

try:  # the SDKs' HTTP client: httpx2 where they are built on it, httpx elsewhere
    import httpx2 as httpx
except ImportError:
    import httpx  # type: ignore[no-redef]

ANTHROPIC_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
CHAT_WEATHER = {"type": "function",
                "function": {"name": "get_weather", "description": "The weather in a city",
                             "parameters": WEATHER["input_schema"]}}
ARGS = '{"city": "Paris", "units": ["c", "f"], "note": "a \\"quoted\\" word"}'


# ---------------------------------------------------------------------------------- requests


def test_a_messages_request_with_system_turns_and_sampling_becomes_a_chat_request() -> None:
    chat = messages_to_chat({
        "model": "claude-ish", "max_tokens": 300, "temperature": 0.2, "top_p": 0.9, "top_k": 40,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "Answer in French."}],
        "stop_sequences": ["END", "STOP"], "metadata": {"user_id": "u1"},
        "messages": [{"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": [{"type": "text", "text": "Bonjour"}]},
                     {"role": "user", "content": [{"type": "text", "text": "And?"}]}],
    }, "upstream-model")
    assert chat == {
        "model": "upstream-model", "max_tokens": 300, "temperature": 0.2, "top_p": 0.9,
        "stop": ["END", "STOP"],
        "messages": [{"role": "system", "content": "Be brief.\nAnswer in French."},
                     {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Bonjour"},
                     {"role": "user", "content": "And?"}],
    }


def test_a_messages_stream_asks_the_chat_upstream_for_usage() -> None:
    chat = messages_to_chat({"model": "m", "max_tokens": 5, "stream": True,
                             "messages": [{"role": "user", "content": "Hi"}]}, "u")
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}


def test_messages_tools_tool_uses_and_tool_results_become_chat_tools_and_tool_messages() -> None:
    chat = messages_to_chat({
        "model": "m", "max_tokens": 100, "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                 "content": [{"type": "text", "text": "station offline"}]},
                {"type": "text", "text": "Thanks"}]},
        ],
    }, "u")
    assert chat["tools"] == [CHAT_WEATHER]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assistant, result_1, result_2, user = chat["messages"][1:]
    assert assistant["content"] == "Checking."
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]] == [("toolu_1", "get_weather", {"city": "Paris"}),
                                                 ("toolu_2", "get_weather", {"city": "Rome"})]
    assert result_1 == {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"}
    assert result_2["tool_call_id"] == "toolu_2" and "station offline" in result_2["content"]
    assert result_2["content"].startswith("Error")
    assert user == {"role": "user", "content": "Thanks"}


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none"),
])
def test_messages_tool_choices_map_to_chat_ones(choice: dict[str, Any], expected: str) -> None:
    chat = messages_to_chat({"model": "m", "max_tokens": 5, "tools": [WEATHER], "tool_choice": choice,
                             "messages": [{"role": "user", "content": "Hi"}]}, "u")
    assert chat["tool_choice"] == expected


def test_messages_images_become_chat_image_urls() -> None:
    chat = messages_to_chat({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}, "u")
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]


@pytest.mark.parametrize(("payload", "param"), [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QQ"}}]}]}]},
     "messages[0].content[0].content[0]"),
    ({"mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]}, "mcp_servers"),
    ({"container": "c1"}, "container"),
])
def test_what_a_chat_upstream_cannot_carry_is_refused_naming_the_field(payload: dict[str, Any],
                                                                      param: str) -> None:
    request = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], **payload}
    with pytest.raises(InvalidRequest) as caught:
        messages_to_chat(request, "u")
    assert caught.value.param == param
    assert caught.value.status == 400


def test_thinking_and_cache_hints_are_dropped_without_changing_the_conversation() -> None:
    chat = messages_to_chat({
        "model": "m", "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "cache_control": {"type": "ephemeral"}, "context_management": {"edits": []},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi",
                                                   "cache_control": {"type": "ephemeral"}}]},
                     {"role": "assistant", "content": [
                         {"type": "thinking", "thinking": "greet back", "signature": "sig"},
                         {"type": "text", "text": "Hello"}]},
                     {"role": "user", "content": "Bye"}]}, "u")
    assert chat == {"model": "u", "max_tokens": 2000,
                    "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                 {"role": "user", "content": "Bye"}]}


def test_a_plain_text_document_is_carried_as_text() -> None:
    chat = messages_to_chat({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document",
         "source": {"type": "text", "media_type": "text/plain", "data": "The doc."}}]}]}, "u")
    assert chat["messages"] == [{"role": "user", "content": "The doc."}]


def test_a_chat_request_becomes_a_messages_request_with_one_system_and_alternating_turns() -> None:
    anthropic = chat_to_messages({
        "model": "gpt-ish", "temperature": 1.5, "top_p": 0.5, "stop": "END", "user": "u1", "seed": 3,
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
                     {"role": "user", "content": "Hi"},
                     {"role": "user", "content": [{"type": "text", "text": "Still there?"}]},
                     {"role": "assistant", "content": "Oui"},
                     {"role": "user", "content": "Bye"}],
    }, "upstream-model")
    assert anthropic == {
        "model": "upstream-model", "temperature": 1.0, "top_p": 0.5, "stop_sequences": ["END"],
        "max_tokens": DEFAULT_MAX_TOKENS, "system": "Be brief.\n\nAnswer in French.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                  {"type": "text", "text": "Still there?"}]},
                     {"role": "assistant", "content": "Oui"},
                     {"role": "user", "content": "Bye"}],
    }


@pytest.mark.parametrize(("limits", "expected"), [
    ({"max_tokens": 50}, 50), ({"max_completion_tokens": 70, "max_tokens": 50}, 70), ({}, DEFAULT_MAX_TOKENS),
])
def test_the_chat_token_limit_becomes_max_tokens(limits: dict[str, int], expected: int) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **limits}
    anthropic = chat_to_messages(request, "u")
    assert anthropic["max_tokens"] == expected


def test_chat_tool_calls_and_consecutive_tool_messages_become_one_user_turn_of_tool_results() -> None:
    anthropic = chat_to_messages({
        "model": "m", "stop": ["A", "B"], "tools": [CHAT_WEATHER], "tool_choice": "required",
        "parallel_tool_calls": False,
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Paris"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Rome"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "21C"}]},
            {"role": "user", "content": "Which is warmer?"}],
    }, "u")
    assert anthropic["stop_sequences"] == ["A", "B"]
    assert anthropic["tools"] == [WEATHER]
    assert anthropic["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    user, assistant, results = anthropic["messages"]
    assert user == {"role": "user", "content": "Weather in Paris and Rome?"}
    assert assistant == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}}]}
    assert results == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "21C"},
        {"type": "text", "text": "Which is warmer?"}]}


def test_chat_images_become_messages_image_blocks() -> None:
    anthropic = chat_to_messages({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}, "u")
    assert anthropic["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]


@pytest.mark.parametrize(("payload", "param"), [
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0]"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
        "data": "QQ", "format": "wav"}}]}]}, "messages[0].content[0]"),
])
def test_what_a_messages_upstream_cannot_carry_is_refused_naming_the_field(payload: dict[str, Any],
                                                                          param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_to_messages({"model": "m", "messages": [{"role": "user", "content": "Hi"}], **payload}, "u")
    assert caught.value.param == param


def test_a_json_schema_response_format_crosses_both_ways() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    anthropic = chat_to_messages({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
                                  "response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "x", "schema": schema}}}, "u")
    assert anthropic["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    chat = messages_to_chat({**anthropic, "max_tokens": 5}, "u")
    assert chat["response_format"]["json_schema"]["schema"] == schema


# ---------------------------------------------------------------------------------- answers


def test_a_chat_answer_with_tool_calls_becomes_an_anthropic_message() -> None:
    message = chat_answer_as_message({
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "upstream",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Let me check.",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ARGS}}]}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }, "catalog-name")
    parsed = Message.model_validate(message)
    assert parsed.id.startswith("msg_") and parsed.model == "catalog-name"
    assert parsed.stop_reason == "tool_use"
    assert [b.type for b in parsed.content] == ["text", "tool_use"]
    assert message["content"][1] == {"type": "tool_use", "id": "call_1", "name": "get_weather",
                                     "input": json.loads(ARGS)}
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (12, 7)


@pytest.mark.parametrize(("finish", "stop"), [
    ("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal"), (None, "end_turn"),
])
def test_chat_finish_reasons_become_anthropic_stop_reasons(finish: str | None, stop: str) -> None:
    choice = {"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": "Hi"}}
    message = chat_answer_as_message({"id": "x", "choices": [choice]}, "m")
    assert Message.model_validate(message).stop_reason == stop
    assert message["usage"] == {"input_tokens": 0, "output_tokens": 0}


@pytest.mark.parametrize(("arguments", "expected"), [
    ("", {}), ("{}", {}),
    ('{"a": 1', {UNPARSED_ARGUMENTS: '{"a": 1'}), ("[1, 2]", {UNPARSED_ARGUMENTS: "[1, 2]"}),
])
def test_tool_arguments_that_are_not_a_json_object_are_kept_visible(arguments: str,
                                                                   expected: dict[str, Any]) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    choice = {"index": 0, "finish_reason": "tool_calls",
              "message": {"role": "assistant", "content": None, "tool_calls": [call]}}
    message = chat_answer_as_message({"id": "x", "choices": [choice]}, "m")
    assert message["content"] == [{"type": "tool_use", "id": "c", "name": "f", "input": expected}]


def test_an_anthropic_message_with_tool_use_becomes_a_chat_completion() -> None:
    chat = message_answer_as_chat({
        "id": "msg_abc", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": json.loads(ARGS)}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 7},
    }, "catalog-name")
    parsed = ChatCompletion.model_validate(chat)
    assert parsed.model == "catalog-name" and parsed.object == "chat.completion"
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.id == "toolu_1" and json.loads(call.function.arguments) == json.loads(ARGS)
    assert parsed.usage is not None
    usage = parsed.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (15, 7, 22)


@pytest.mark.parametrize(("stop", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("refusal", "content_filter"),
])
def test_anthropic_stop_reasons_become_chat_finish_reasons(stop: str, finish: str) -> None:
    answer = {"id": "msg_1", "content": [{"type": "text", "text": "Hi"}], "stop_reason": stop,
              "usage": {"input_tokens": 1, "output_tokens": 1}}
    chat = message_answer_as_chat(answer, "m")
    assert ChatCompletion.model_validate(chat).choices[0].finish_reason == finish


# ---------------------------------------------------------------------------------- streams


def sse(events: list[bytes]) -> bytes:
    return b"".join(events)


def chat_chunk(delta: dict[str, Any] | None, finish: str | None = None,
               usage: dict[str, int] | None = None) -> bytes:
    chunk: dict[str, Any] = {"id": "chatcmpl-s1", "object": "chat.completion.chunk", "created": 1,
                             "model": "upstream",
                             "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                                   "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def anthropic_event(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def translate(translator: ChatStreamAsMessages | MessagesStreamAsChat | MessageIdStream, upstream: bytes,
              piece: int) -> bytes:
    """Feeds `upstream` in pieces of `piece` bytes, as the network would cut it."""
    splitter, out = SseSplitter(), []
    for i in range(0, len(upstream), piece):
        for one in splitter.feed(upstream[i:i + piece]):
            out += translator.feed(one)
    for one in splitter.rest():
        out += translator.feed(one)
    out += translator.end()
    return b"".join(out)


def read_anthropic(stream: bytes) -> tuple[list[str], Any]:
    """The event types of an Anthropic stream, each checked by the SDK's types, and the message its
    accumulator builds from them."""
    types, snapshot, bufs = [], None, {}
    for one in SseSplitter().feed(stream):
        name, data = one.split(b"\n", 1)
        assert name.startswith(b"event: ") and data.startswith(b"data: ")
        payload = orjson.loads(data[6:])
        assert name[7:].decode() == payload["type"]
        if payload == {"type": "ping"}:  # the SDK skips pings before its types see them
            continue
        parsed = ANTHROPIC_EVENT.validate_python(payload)
        types.append(payload["type"])
        snapshot = accumulate_event(event=parsed, current_snapshot=snapshot, json_bufs=bufs)
    return types, snapshot


def read_chat(stream: bytes) -> tuple[list[ChatCompletionChunk], Any]:
    """The chunks of a chat stream, each checked by the SDK's type, and the completion its
    accumulator builds from them; the stream must end with [DONE]."""
    events = SseSplitter().feed(stream)
    assert events[-1] == b"data: [DONE]"
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    chunks = []
    for one in events[:-1]:
        chunk = ChatCompletionChunk.model_validate(orjson.loads(one.removeprefix(b"data: ")))
        chunks.append(chunk)
        list(state.handle_chunk(chunk))
    return chunks, state.get_final_completion()


CHAT_TEXT_STREAM = sse([
    chat_chunk({"role": "assistant", "content": ""}),
    chat_chunk({"content": "Hello"}), chat_chunk({"content": ", wor"}), chat_chunk({"content": "ld!"}),
    chat_chunk({}, "stop"),
    chat_chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
    b"data: [DONE]\n\n",
])


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_a_chat_text_stream_reads_as_an_anthropic_stream(piece: int) -> None:
    types, message = read_anthropic(translate(ChatStreamAsMessages("catalog-name"), CHAT_TEXT_STREAM, piece))
    assert types == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert message.model == "catalog-name" and message.id.startswith("msg_")
    assert message.content[0].text == "Hello, world!"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 4)


def test_a_translated_stream_pings_after_its_start_as_anthropic_does() -> None:
    events = SseSplitter().feed(translate(ChatStreamAsMessages("m"), CHAT_TEXT_STREAM, 4096))
    assert [e.split(b"\n")[0] for e in events[:2]] == [b"event: message_start", b"event: ping"]


def test_a_chat_stream_cut_short_still_ends_well_formed() -> None:
    upstream = sse([chat_chunk({"role": "assistant", "content": "Hel"}), chat_chunk({"content": "lo"})])
    types, message = read_anthropic(translate(ChatStreamAsMessages("m"), upstream, 5))
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert message.content[0].text == "Hello"


def test_an_empty_upstream_stream_still_gives_the_client_a_whole_message() -> None:
    types, message = read_anthropic(b"".join(ChatStreamAsMessages("m").end()))
    assert types == ["message_start", "message_delta", "message_stop"]
    assert message.content == []


def test_a_chat_stream_error_ends_the_anthropic_stream_with_an_error_event() -> None:
    translator = ChatStreamAsMessages("m")
    out = translator.feed(chat_chunk({"content": "Hi"}).rstrip(b"\n"))
    out += translator.feed(b'data: {"error": {"message": "secret upstream detail"}}')
    out += translator.end()
    last = out[-1]
    assert last.startswith(b"event: error\n")
    assert b"secret" not in last
    assert orjson.loads(last.split(b"data: ", 1)[1])["type"] == "error"


TOOL_CALL_STREAM = sse([
    chat_chunk({"role": "assistant", "content": "Checking."}),
    chat_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "get_weather", "arguments": ""}}]}),
    *[chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGS[i:i + 5]}}]})
      for i in range(0, len(ARGS), 5)],
    chat_chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                                "function": {"name": "get_time", "arguments": "{}"}}]}),
    chat_chunk({}, "tool_calls"),
    chat_chunk(None, usage={"prompt_tokens": 20, "completion_tokens": 30, "total_tokens": 50}),
    b"data: [DONE]\n\n",
])


def test_a_chat_tool_call_stream_reads_as_anthropic_tool_use_blocks_and_round_trips() -> None:
    anthropic_stream = translate(ChatStreamAsMessages("m"), TOOL_CALL_STREAM, 11)
    _, message = read_anthropic(anthropic_stream)
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[1].id == "call_1" and message.content[1].name == "get_weather"
    assert message.content[1].input == json.loads(ARGS)
    assert message.content[2].name == "get_time" and message.content[2].input == {}
    assert message.stop_reason == "tool_use"

    _, completion = read_chat(translate(MessagesStreamAsChat("m"), anthropic_stream, 13))
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("call_1", "get_weather", ARGS), ("call_2", "get_time", "{}")]
    assert completion.usage.prompt_tokens == 20 and completion.usage.completion_tokens == 30


ANTHROPIC_STREAM = sse([anthropic_event(e) for e in [
    {"type": "message_start", "message": {
        "id": "msg_s1", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 25, "output_tokens": 1}}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                                  "signature": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": ", world!"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1",
                                                                  "name": "get_weather", "input": {}}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    *[{"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                            "partial_json": ARGS[i:i + 4]}}
      for i in range(0, len(ARGS), 4)],
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 42}},
    {"type": "message_stop"},
]])


@pytest.mark.parametrize("piece", [1, 9, 4096])
def test_an_anthropic_stream_reads_as_a_chat_stream(piece: int) -> None:
    chunks, completion = read_chat(translate(MessagesStreamAsChat("catalog-name"), ANTHROPIC_STREAM, piece))
    assert {c.model for c in chunks} == {"catalog-name"}
    assert len({c.id for c in chunks}) == 1
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 2
    choice = completion.choices[0]
    assert choice.message.content == "Hello, world!"
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("toolu_1", "get_weather", ARGS)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (25, 42)


def test_an_anthropic_text_stream_round_trips_through_chat() -> None:
    chat_stream = translate(MessagesStreamAsChat("m"), ANTHROPIC_STREAM, 64)
    _, message = read_anthropic(translate(ChatStreamAsMessages("m"), chat_stream, 64))
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Hello, world!"
    assert message.content[1].input == json.loads(ARGS)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (25, 42)


def test_an_anthropic_stream_cut_short_still_ends_with_a_finish_usage_and_done() -> None:
    upstream = ANTHROPIC_STREAM.split(b"event: content_block_stop")[0]
    chunks, completion = read_chat(translate(MessagesStreamAsChat("m"), upstream, 17))
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.content is None or completion.choices[0].message.content == ""
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 25


def test_an_anthropic_error_event_ends_the_chat_stream_with_an_error() -> None:
    translator = MessagesStreamAsChat("m")
    out = translator.feed(anthropic_event({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "c", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 0}}}))
    out += translator.feed(b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
                           b'"message": "secret upstream detail"}}')
    out += translator.end()
    assert b"secret" not in out[-1]
    assert orjson.loads(out[-1].removeprefix(b"data: "))["error"]["type"] == "server_error"


def test_a_tool_without_parameters_reaches_the_chat_client_with_json_arguments() -> None:
    upstream = sse([anthropic_event(e) for e in [
        {"type": "message_start", "message": {
            "id": "msg_2", "type": "message", "role": "assistant", "model": "c", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_9",
                                                                      "name": "get_time", "input": {}}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]])
    _, completion = read_chat(translate(MessagesStreamAsChat("m"), upstream, 32))
    call = completion.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("toolu_9", "get_time", {})


def test_chat_tool_calls_streamed_without_an_index_stay_apart_by_their_ids() -> None:
    upstream = sse([
        chat_chunk({"tool_calls": [{"id": "call_a", "function": {"name": "f", "arguments": '{"x":'}}]}),
        chat_chunk({"tool_calls": [{"function": {"arguments": " 1}"}}]}),
        chat_chunk({"tool_calls": [{"id": "call_b", "function": {"name": "g", "arguments": "{}"}}]}),
        chat_chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ])
    _, message = read_anthropic(translate(ChatStreamAsMessages("m"), upstream, 10))
    assert [(b.id, b.name, b.input) for b in message.content] == [
        ("call_a", "f", {"x": 1}), ("call_b", "g", {})]
    assert message.stop_reason == "tool_use"


def test_a_malformed_upstream_answer_reads_as_a_valid_message_without_made_up_counts() -> None:
    message = chat_answer_as_message({"id": 7, "choices": [{"message": {"content": "Hi", "tool_calls": "x"},
                                                            "finish_reason": {"odd": 1}}],
                                      "usage": {"prompt_tokens": "9", "completion_tokens": -3}}, "m")
    parsed = Message.model_validate(message)
    assert parsed.content[0].text == "Hi" and parsed.stop_reason == "end_turn"
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (0, 0)


def test_malformed_upstream_stream_events_leave_a_well_formed_stream() -> None:
    odd = [b'data: {"choices": "x"}', b'data: {"choices": [{"delta": "x"}]}', b"data: not json",
           b'data: {"choices": [{"delta": {"tool_calls": ["x", {"function": 3}]}}]}']
    translator = ChatStreamAsMessages("m")
    out = [e for one in odd for e in translator.feed(one)] + translator.end()
    types, _ = read_anthropic(b"".join(out))
    assert types[0] == "message_start" and types[-1] == "message_stop"
    chat = MessagesStreamAsChat("m")
    out = [e for one in [b'event: x\ndata: {"type": "content_block_delta", "index": [1], "delta": 5}',
                         b'data: {"type": "message_delta", "delta": null, "usage": {"output_tokens": "2"}}']
           for e in chat.feed(one)] + chat.end()
    chunks, _ = read_chat(b"".join(out))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 0


# ------------------------------------------------- the official SDKs, over an in-process transport


def answering(upstream: bytes, translator: ChatStreamAsMessages | MessagesStreamAsChat,
              seen: list[dict[str, Any]]) -> httpx.MockTransport:
    """A transport that records each request body and answers with `upstream` translated, as the
    gateway would relay it."""
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=translate(translator, upstream, 23))
    return httpx.MockTransport(handle)


def anthropic_client(transport: httpx.MockTransport) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url="http://gateway.test", max_retries=0,
                               http_client=httpx.Client(transport=transport))


def openai_client(transport: httpx.MockTransport) -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url="http://gateway.test/v1", max_retries=0,
                         http_client=httpx.Client(transport=transport))


def test_the_anthropic_sdk_streams_a_translated_chat_upstream() -> None:
    seen: list[dict[str, Any]] = []
    client = anthropic_client(answering(TOOL_CALL_STREAM, ChatStreamAsMessages("claude-alias"), seen))
    with client.messages.stream(model="claude-alias", max_tokens=64, system="Be brief.",
                                tools=[WEATHER],
                                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    chat = messages_to_chat(seen[0], "upstream-model")
    assert chat["stream_options"] == {"include_usage": True} and chat["tools"] == [CHAT_WEATHER]
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert texts == ["Checking."]
    assert message.model == "claude-alias" and message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[1].input == json.loads(ARGS)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (20, 30)


def test_the_anthropic_sdk_raises_on_a_translated_stream_that_broke() -> None:
    upstream = sse([chat_chunk({"content": "Hi"}), b'data: {"error": {"message": "boom"}}\n\n'])
    client = anthropic_client(answering(upstream, ChatStreamAsMessages("m"), []))
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model="m", max_tokens=8,
                                    messages=[{"role": "user", "content": "Hi"}]) as stream:
            list(stream.text_stream)


def test_the_openai_sdk_streams_a_translated_messages_upstream() -> None:
    seen: list[dict[str, Any]] = []
    client = openai_client(answering(ANTHROPIC_STREAM, MessagesStreamAsChat("gpt-alias"), seen))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    with client.chat.completions.stream(model="gpt-alias", tools=[CHAT_WEATHER], messages=messages) as stream:
        completion = stream.get_final_completion()
    request = chat_to_messages(seen[0], "claude-upstream")
    assert request["system"] == "Be brief." and request["max_tokens"] == DEFAULT_MAX_TOKENS
    assert request["tools"] == [WEATHER]
    choice = completion.choices[0]
    assert completion.model == "gpt-alias" and choice.finish_reason == "tool_calls"
    assert choice.message.content == "Hello, world!"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].function.arguments == ARGS
    assert completion.usage is not None and completion.usage.total_tokens == 25 + 42


def test_the_openai_sdk_raises_on_a_translated_stream_that_broke() -> None:
    error = {"type": "overloaded_error", "message": "x"}
    upstream = sse([anthropic_event({"type": "error", "error": error})])
    client = openai_client(answering(upstream, MessagesStreamAsChat("m"), []))
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="m", stream=True,
                                            messages=[{"role": "user", "content": "Hi"}]))


# --- llama-server's own Messages answers, named as chat completions --------------------------------


def test_an_engines_whole_message_named_as_a_chat_completion_gets_anthropics_id() -> None:
    native = orjson.loads(LLAMA_WHOLE)
    renamed = renamed_message(native, "catalog-name")
    assert renamed["id"] == "msg_OXIG8"
    assert {**renamed, "id": native["id"]} == native  # nothing else changed
    assert Message.model_validate(renamed).id == "msg_OXIG8"
    assert renamed_message({**native, "id": "msg_already"}, "m")["id"] == "msg_already"


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_an_engines_message_stream_named_as_a_chat_completion_starts_with_anthropics_id(piece: int) -> None:
    out = translate(MessageIdStream("catalog-name"), LLAMA_STREAM, piece)
    types, message = read_anthropic(out)
    assert message.id == "msg_cj6Z7" and types[0] == "message_start"
    assert message.content[0].text == "Say hi<|"
    # Only message_start was read and written again: the rest passed byte for byte.
    assert out.split(b"\n\n", 1)[1] == LLAMA_STREAM.split(b"\n\n", 1)[1]
