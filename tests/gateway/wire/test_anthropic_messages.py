"""The Anthropic Messages dialect with plain data: requests checked as Anthropic checks them, the
text judges read, and endings the official SDK reads as Anthropic's own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from anthropic.types import ModelInfo, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from pydantic import TypeAdapter

from llmgw.core.errors import (
    GuardBlocked,
    GuardUnavailable,
    InvalidRequest,
    LlmgwError,
    ModelNotFound,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
    UpstreamError,
    UpstreamRefused,
    UpstreamTimeout,
)
from llmgw.gateway.wire import anthropic_messages as am
from llmgw.gateway.wire.sse import SseSplitter, event, json_of
from llmgw.guard.prompts import Turn

EVENTS = TypeAdapter(RawMessageStreamEvent)
ERRORS = TypeAdapter(ErrorResponse)
HI = [{"role": "user", "content": "Say hi"}]

# What llama-server answers to /v1/messages, byte for byte (ids shortened).
WHOLE = (b'{"id":"chatcmpl-OXIG8","type":"message","role":"assistant","content":[{"type":"text",'
         b'"text":"Say hi<|im_end|>"}],"model":"m.gguf","stop_reason":"max_tokens","stop_sequence":null,'
         b'"usage":{"cache_read_input_tokens":0,"input_tokens":26,"output_tokens":8}}')
STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-cj6Z7","type":"message",'
    b'"role":"assistant","content":[],"model":"m.gguf","stop_reason":null,"stop_sequence":null,"usage":'
    b'{"cache_read_input_tokens":21,"input_tokens":5,"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
    b'{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"text_delta","text":"Say"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"text_delta","text":" hi"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"text_delta","text":"<"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"text_delta","text":"|"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens",'
    b'"stop_sequence":null},"usage":{"output_tokens":4}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
# A tool call as Anthropic streams it.
TOOL_STREAM = (
    b'event: content_block_start\ndata: {"type":"content_block_start","index":1,"content_block":'
    b'{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,"delta":'
    b'{"type":"input_json_delta","partial_json":"{\\"city\\": "}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,"delta":'
    b'{"type":"input_json_delta","partial_json":"\\"Paris\\"}"}}\n\n'
)


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": HI, **fields}


def events(raw: bytes) -> list[bytes]:
    splitter = SseSplitter()
    return splitter.feed(raw) + splitter.rest()


# --- requests ---------------------------------------------------------------------------------


def test_a_request_reads_into_model_turns_cap_and_stream() -> None:
    ask = am.read(request(stream=True, system="Be brief.", stop_sequences=["\n\n"], temperature=0.5,
                          tools=[], messages=[*HI, {"role": "assistant", "content": "Hi"},
                                              {"role": "user", "content": "Again"}]))
    assert ask.model == "m"
    assert ask.max_tokens == 64
    assert ask.stream is True
    assert ask.turns == [Turn("system", "Be brief."), Turn("user", "Say hi"), Turn("assistant", "Hi"),
                         Turn("user", "Again")]
    assert am.read(request()).stream is False


def test_system_blocks_and_text_blocks_are_joined() -> None:
    ask = am.read(request(
        system=[{"type": "text", "text": "Rule one."}, {"type": "text", "text": "Rule two.",
                                                        "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                                {"type": "image", "source": {"type": "base64", "data": "x"}},
                                                {"type": "text", "text": "what is it?"}]}],
    ))
    assert ask.turns == [Turn("system", "Rule one.\nRule two."), Turn("user", "Look:\nwhat is it?")]


def test_tool_calls_are_the_assistants_words_and_tool_results_the_users() -> None:
    ask = am.read(request(messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2",
             "content": [{"type": "text", "text": "and warm"}], "is_error": False},
        ]},
    ]))
    assert ask.turns == [
        Turn("user", "Weather in Paris?"),
        Turn("assistant", 'Let me check.\ntool get_weather: {"city":"Paris"}'),
        Turn("user", "sunny\nand warm"),
    ]


@pytest.mark.parametrize(("change", "param"), [
    ({"model": None}, "model"),
    ({"model": 7}, "model"),
    ({"messages": None}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": ["hi"]}, "messages.0"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"messages": [*HI, {"role": "user", "content": 5}]}, "messages.1.content"),
    ({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}, "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]},
     "messages.0.content.0.input"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     "messages.0.content.0.tool_use_id"),
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 1_000_001}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": "64"}, "max_tokens"),
    ({"stream": "yes"}, "stream"),
    ({"system": 5}, "system"),
    ({"system": [{"type": "image"}]}, "system.0"),
    ({"stop_sequences": ["ok", 1]}, "stop_sequences"),
    ({"stop_sequences": "STOP"}, "stop_sequences"),
    ({"tools": {"name": "f"}}, "tools"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": True}, "top_p"),
    ({"top_k": 1.5}, "top_k"),
])
def test_a_bad_request_is_refused_naming_the_field(change: dict[str, Any], param: str) -> None:
    payload = {k: v for k, v in {**request(), **change}.items() if v is not None}
    with pytest.raises(InvalidRequest) as refused:
        am.read(payload)
    assert refused.value.param == param
    assert param.split(".")[0] in refused.value.message


def test_count_tokens_takes_no_max_tokens_never_streams_and_gives_judges_nothing() -> None:
    ask = am.count_tokens_check({"model": "m", "system": "Be brief.", "messages": HI, "tools": []})
    assert ask.max_tokens is None
    assert ask.stream is False
    assert ask.turns == []  # nothing is generated: not judged
    with pytest.raises(InvalidRequest) as refused:
        am.count_tokens_check({"model": "m", "system": 3, "messages": HI})
    assert refused.value.param == "system"
    with pytest.raises(InvalidRequest) as refused:
        am.count_tokens_check({"model": "m", "messages": []})
    assert refused.value.param == "messages"


# --- answers ----------------------------------------------------------------------------------


def test_the_text_of_a_whole_answer() -> None:
    assert am.answer_text(WHOLE) == "Say hi<|im_end|>"
    with_tool = orjson.dumps({"type": "message", "content": [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]})
    assert am.answer_text(with_tool) == 'Checking.\ntool get_weather: {"city":"Paris"}'
    assert am.answer_text(b"not json") == ""
    assert am.answer_text(b'{"content": 3}') == ""


def test_the_text_of_a_stream_is_its_deltas() -> None:
    assert "".join(am.event_text(e) for e in events(STREAM)) == "Say hi<|"
    tool = "".join(am.event_text(e) for e in events(TOOL_STREAM))
    assert tool == '\ntool get_weather: {"city": "Paris"}'
    assert am.event_text(b"event: ping\ndata: {\"type\": \"ping\"}") == ""


def test_usage_markers_count_the_events_that_carry_text() -> None:
    usage = am.WIRE.usage
    assert sum(STREAM.count(m) for m in usage.text_markers) == 4
    assert sum(TOOL_STREAM.count(m) for m in usage.text_markers) == 2
    first = events(STREAM)[0]
    assert usage.prompt_first and usage.prompt in first
    assert usage.completion in events(STREAM)[-2]


# --- errors and endings -----------------------------------------------------------------------


@pytest.mark.parametrize(("error", "type_"), [
    (InvalidRequest("bad"), "invalid_request_error"),
    (Unauthenticated("no key"), "authentication_error"),
    (LlmgwError("forbidden"), "api_error"),
    (ModelNotFound("no such model"), "not_found_error"),
    (RateLimited("slow down", 3), "rate_limit_error"),
    (UpstreamError("upstream failed"), "api_error"),
    (GuardUnavailable("no judge"), "overloaded_error"),
    (UpstreamTimeout("too slow"), "timeout_error"),
    (UpstreamRefused("refused", 422, "invalid_request_error"), "invalid_request_error"),
])
def test_errors_take_anthropics_shape_and_type(error: LlmgwError, type_: str) -> None:
    body = ERRORS.validate_json(am.error_body(error))
    assert body.type == "error"
    assert body.error.type == type_
    assert body.error.message == error.message


def test_error_types_by_status() -> None:
    assert [am.error_type(s) for s in (400, 401, 403, 404, 413, 429, 500, 502, 503, 504, 409, 418, 507)] == [
        "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
        "request_too_large", "rate_limit_error", "api_error", "api_error", "overloaded_error",
        "timeout_error", "invalid_request_error", "invalid_request_error", "api_error",
    ]
    assert orjson.loads(am.error_body(PayloadTooLarge("too big")))["error"]["type"] == "request_too_large"


def test_a_blocked_stream_ends_with_a_refusal_and_an_error_event() -> None:
    ending = events(am.blocked_ending("m", GuardBlocked("the answer was unsafe")))
    assert [e.split(b"\n")[0] for e in ending] == [b"event: message_delta", b"event: error"]
    delta = EVENTS.validate_python(json_of(ending[0]))
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "refusal"
    error = ERRORS.validate_python(json_of(ending[1]))
    assert (error.error.type, error.error.message) == ("invalid_request_error", "the answer was unsafe")


def test_a_guard_that_could_not_judge_ends_with_an_error_event_only() -> None:
    ending = events(am.blocked_ending("m", GuardUnavailable("no judge answered")))
    assert len(ending) == 1
    assert ERRORS.validate_python(json_of(ending[0])).error.type == "overloaded_error"


def sdk(body: bytes) -> anthropic.Anthropic:
    """The official client, answered by `body` as an event stream."""
    def answer(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return anthropic.Anthropic(api_key="sk-test", base_url="http://llmgw.test", max_retries=0,
                               http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))


def cut_after_text(stream: bytes) -> bytes:
    """The sample stream as the guard releases it before stopping: up to its text."""
    return b"".join(e + b"\n\n" for e in events(stream)[:4])


def test_the_sdk_stream_raises_the_guards_message_after_a_refusal_stop() -> None:
    client = sdk(cut_after_text(STREAM) + am.blocked_ending("m", GuardBlocked("the answer was unsafe")))
    seen: list[Any] = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for ev in client.messages.create(model="m", max_tokens=8, messages=HI, stream=True):
            seen.append(ev)
    assert "the answer was unsafe" in str(raised.value)
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert seen[-1].type == "message_delta" and seen[-1].delta.stop_reason == "refusal"

    client = sdk(cut_after_text(STREAM) + am.blocked_ending("m", GuardBlocked("the answer was unsafe")))
    with client.messages.stream(model="m", max_tokens=8, messages=HI) as stream:
        text = []
        with pytest.raises(anthropic.APIStatusError, match="the answer was unsafe"):
            for piece in stream.text_stream:
                text.append(piece)
        assert "".join(text) == "Say hi"
        assert stream.current_message_snapshot.stop_reason == "refusal"


def test_the_sdk_stream_raises_when_the_upstream_broke() -> None:
    client = sdk(cut_after_text(STREAM) + am.stream_broke())
    with pytest.raises(anthropic.APIStatusError, match="upstream stream broke") as raised:
        list(client.messages.create(model="m", max_tokens=8, messages=HI, stream=True))
    assert raised.value.body["error"]["type"] == "api_error"


def test_the_whole_sample_stream_reads_in_the_sdk() -> None:
    with sdk(STREAM).messages.stream(model="m", max_tokens=8, messages=HI) as stream:
        message = stream.get_final_message()
    assert message.content[0].text == "Say hi<|"


# --- models -----------------------------------------------------------------------------------


def test_models_list_in_anthropics_shape() -> None:
    body = orjson.loads(am.models_body([
        ("qwen", datetime(2026, 3, 1, 12, 30, tzinfo=UTC)),
        ("gemma", datetime(2026, 3, 2, 8, 0)),  # the store's naive UTC
        ("old", None),
    ]))
    assert body["has_more"] is False
    assert (body["first_id"], body["last_id"]) == ("qwen", "old")
    assert [m["created_at"] for m in body["data"]] == [
        "2026-03-01T12:30:00Z", "2026-03-02T08:00:00Z", "1970-01-01T00:00:00Z",
    ]
    info = ModelInfo.model_validate(body["data"][0])
    assert (info.id, info.display_name, info.type) == ("qwen", "qwen", "model")
    empty = orjson.loads(am.models_body([]))
    assert empty == {"data": [], "has_more": False, "first_id": None, "last_id": None}


def test_reasoning_is_judged_like_the_answer_it_comes_with() -> None:
    # A client shows thinking to its user: the guard must see it, streamed or whole.
    delta = event({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": "plan the attack"}}, "content_block_delta")
    assert am.event_text(delta.rstrip(b"\n")) == "plan the attack"
    whole = orjson.dumps({"content": [{"type": "thinking", "thinking": "plan", "signature": "s"},
                                      {"type": "text", "text": "done"}]})
    assert am.answer_text(whole) == "plan\ndone"
