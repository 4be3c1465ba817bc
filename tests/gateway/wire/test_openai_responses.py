"""The OpenAI Responses dialect with plain data: requests checked (and what needs stored responses
refused), the text judges read, and endings the official SDK reads as OpenAI's own."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import orjson
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from llmgw.core.errors import GuardBlocked, GuardUnavailable, InvalidRequest, ModelNotFound
from llmgw.gateway.wire import openai_responses as rs
from llmgw.gateway.wire.dialect import SentSoFar
from llmgw.gateway.wire.sse import SseSplitter, event, json_of
from llmgw.guard.prompts import Turn

EVENTS = TypeAdapter(ResponseStreamEvent)

# What llama-server answers to /v1/responses, byte for byte (ids shortened).
WHOLE = (b'{"completed_at":1796060377,"created_at":1796060377,"id":"resp_BW6d","model":"m.gguf",'
         b'"object":"response","output":[{"content":[{"type":"output_text","annotations":[],"logprobs":[],'
         b'"text":"say hello<|im_end|>"}],"id":"msg_0mMY","role":"assistant","status":"completed",'
         b'"type":"message"}],"status":"completed","usage":{"input_tokens":26,"output_tokens":8,'
         b'"total_tokens":34,"input_tokens_details":{"cached_tokens":21}}}')
STREAM = (
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_XbEm",'
    b'"object":"response","status":"in_progress"}}\n\n'
    b'event: response.in_progress\ndata: {"type":"response.in_progress","response":{"id":"resp_XbEm",'
    b'"object":"response","status":"in_progress"}}\n\n'
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added","item":{"content":[],'
    b'"id":"msg_fQLY","role":"assistant","status":"in_progress","type":"message"}}\n\n'
    b'event: response.content_part.added\ndata: {"type":"response.content_part.added","item_id":"msg_fQLY",'
    b'"part":{"type":"output_text","text":""}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_fQLY",'
    b'"delta":"Say"}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_fQLY",'
    b'"delta":" hi"}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_fQLY",'
    b'"delta":"<"}\n\n'
    b'event: response.output_text.done\ndata: {"type":"response.output_text.done","item_id":"msg_fQLY",'
    b'"text":"Say hi<"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_XbEm",'
    b'"object":"response","created_at":1796060377,"status":"completed","model":"m.gguf","output":[],'
    b'"usage":{"input_tokens":26,"output_tokens":3,"total_tokens":29,"input_tokens_details":'
    b'{"cached_tokens":21}}},"timings":{"cache_n":21,"prompt_n":5}}\n\n'
)
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "Say hi", **fields}


def events(raw: bytes) -> list[bytes]:
    splitter = SseSplitter()
    return splitter.feed(raw) + splitter.rest()


# --- requests ---------------------------------------------------------------------------------


def test_a_string_input_reads_as_one_user_turn() -> None:
    ask = rs.read(request(instructions="Be brief.", max_output_tokens=32, stream=True, store=False,
                          tools=[], temperature=0.2, background=False))
    assert ask.model == "m"
    assert ask.turns == [Turn("system", "Be brief."), Turn("user", "Say hi")]
    assert ask.max_tokens == 32
    assert ask.stream is True
    plain = rs.read(request())
    assert (plain.max_tokens, plain.stream) == (None, False)


def test_input_items_read_as_turns_with_tool_calls_and_outputs() -> None:
    ask = rs.read(request(input=[
        {"role": "developer", "content": "Answer in French."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Weather in Paris?"},
            {"type": "input_image", "image_url": "https://example.com/sky.png"},
        ]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        CALL,
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Il fait beau."}]},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "and warm"}]},
    ]))
    assert ask.turns == [
        Turn("system", "Answer in French."),
        Turn("user", "Weather in Paris?"),
        Turn("assistant", 'tool get_weather: {"city":"Paris"}'),
        Turn("user", "sunny"),
        Turn("assistant", "Il fait beau."),
        Turn("user", "and warm"),
    ]


@pytest.mark.parametrize(("change", "param"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0"),
])
def test_what_needs_stored_responses_is_refused_not_dropped(change: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        rs.read(request(**change))
    assert refused.value.param == param
    assert refused.value.status == 400
    assert "not supported" in refused.value.message


@pytest.mark.parametrize(("change", "param"), [
    ({"model": None}, "model"),
    ({"model": 3}, "model"),
    ({"input": None}, "input"),
    ({"input": 5}, "input"),
    ({"input": ["hi"]}, "input.0"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role"),
    ({"input": [{"role": "user", "content": 5}]}, "input.0.content"),
    ({"input": [{"role": "user", "content": [{"text": "no type"}]}]}, "input.0.content.0"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input.0.content.0.text"),
    ({"input": [{**CALL, "arguments": {"city": "Paris"}}]}, "input.0.arguments"),
    ({"input": [{**CALL, "name": None}]}, "input.0.name"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input.0.call_id"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]}, "input.0.output"),
    ({"instructions": ["Be brief."]}, "instructions"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 1_000_001}, "max_output_tokens"),
    ({"max_output_tokens": "32"}, "max_output_tokens"),
    ({"stream": "yes"}, "stream"),
    ({"store": "no"}, "store"),
    ({"tools": {}}, "tools"),
    ({"temperature": "warm"}, "temperature"),
])
def test_a_bad_request_is_refused_naming_the_field(change: dict[str, Any], param: str) -> None:
    payload = {k: v for k, v in {**request(), **change}.items() if v is not None}
    with pytest.raises(InvalidRequest) as refused:
        rs.read(payload)
    assert refused.value.param == param
    assert param.split(".")[0] in refused.value.message


# --- answers ----------------------------------------------------------------------------------


def test_the_text_of_a_whole_response() -> None:
    assert rs.answer_text(WHOLE) == "say hello<|im_end|>"
    with_call = orjson.dumps({"object": "response", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {**CALL, "id": "fc_1", "status": "completed"},
    ]})
    assert rs.answer_text(with_call) == 'Checking.\ntool get_weather: {"city":"Paris"}'
    assert rs.answer_text(b"[]") == ""
    assert rs.answer_text(b"{") == ""


def test_the_text_of_a_stream_is_its_deltas() -> None:
    assert "".join(rs.event_text(e) for e in events(STREAM)) == "Say hi<"
    call = (event({"type": "response.output_item.added", "output_index": 1,
                   "item": {**CALL, "arguments": "", "id": "fc_1"}}, "response.output_item.added")
            + event({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                      "delta": '{"city":'}, "response.function_call_arguments.delta")
            + event({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                      "delta": '"Paris"}'}, "response.function_call_arguments.delta"))
    assert "".join(rs.event_text(e) for e in events(call)) == '\ntool get_weather: {"city":"Paris"}'
    usage = rs.WIRE.usage
    assert sum(call.count(m) for m in usage.text_markers) == 2


def test_usage_markers_count_the_events_that_carry_text() -> None:
    usage = rs.WIRE.usage
    assert sum(STREAM.count(m) for m in usage.text_markers) == 3
    last = events(STREAM)[-1]
    assert usage.prompt in last and usage.completion in last
    assert not usage.prompt_first


def test_the_response_id_of_a_stream() -> None:
    assert rs.response_id_of(events(STREAM)[0]) == "resp_XbEm"
    assert rs.response_id_of(events(STREAM)[4]) is None


# --- errors and endings -----------------------------------------------------------------------


def test_errors_take_openais_shape() -> None:
    body = orjson.loads(rs.error_body(ModelNotFound("model 'x' is not served", param="model")))
    assert body == {"error": {"message": "model 'x' is not served", "type": "invalid_request_error",
                              "param": "model", "code": "model_not_found"}}


def test_a_blocked_stream_ends_with_an_error_and_an_incomplete_response() -> None:
    created = event({"type": "response.created", "response": {"id": "resp_1"}}, "response.created")
    ending = events(rs.blocked_ending("m", GuardBlocked("the answer was unsafe"),
                                      SentSoFar(created.rstrip(b"\n"), 9)))
    parsed = [EVENTS.validate_python(json_of(e)) for e in ending]
    assert [e.split(b"\n")[0] for e in ending] == [b"event: error", b"event: response.incomplete"]
    error, incomplete = parsed
    assert error.type == "error"
    assert (error.code, error.message) == ("content_filter", "the answer was unsafe")
    assert error.sequence_number == 9
    assert incomplete.type == "response.incomplete"
    assert incomplete.sequence_number == 10
    assert (incomplete.response.id, incomplete.response.status) == ("resp_1", "incomplete")
    assert incomplete.response.incomplete_details is not None
    assert incomplete.response.incomplete_details.reason == "content_filter"


def test_a_guard_that_could_not_judge_fails_the_response() -> None:
    ending = events(rs.blocked_ending("m", GuardUnavailable("no judge answered")))
    error, failed = (EVENTS.validate_python(json_of(e)) for e in ending)
    assert (error.type, error.code) == ("error", "guard_unavailable")
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert failed.response.error is not None
    assert failed.response.error.message == "no judge answered"


def test_a_broken_stream_ends_with_an_error_event() -> None:
    (broke,) = events(rs.stream_broke())
    error = EVENTS.validate_python(json_of(broke))
    assert (error.type, error.message) == ("error", "upstream stream broke")


# An upstream stream in OpenAI's own numbering (the SDK's stream helper needs output indexes).
OPENAI_HEAD = (
    event({"type": "response.created", "sequence_number": 0, "response": {
        "id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "in_progress",
        "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}}, "response.created")
    + event({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {
        "type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}},
        "response.output_item.added")
    + event({"type": "response.content_part.added", "sequence_number": 2, "output_index": 0,
             "content_index": 0, "item_id": "msg_1",
             "part": {"type": "output_text", "text": "", "annotations": []}}, "response.content_part.added")
    + event({"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0,
             "content_index": 0, "item_id": "msg_1", "delta": "Once upon", "logprobs": []},
            "response.output_text.delta")
)


def sdk(body: bytes) -> openai.OpenAI:
    """The official client, answered by `body` as an event stream."""
    def answer(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return openai.OpenAI(api_key="sk-test", base_url="http://llmgw.test/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))


def test_the_sdk_reports_a_blocked_stream() -> None:
    created = OPENAI_HEAD.split(b"\n\n")[0]
    ending = rs.blocked_ending("m", GuardBlocked("the answer was unsafe"), SentSoFar(created, 4))
    seen = list(sdk(OPENAI_HEAD + ending).responses.create(model="m", input="hi", stream=True))
    assert [e.type for e in seen][-2:] == ["error", "response.incomplete"]
    assert seen[-2].message == "the answer was unsafe"
    assert seen[-1].response.incomplete_details.reason == "content_filter"

    with sdk(OPENAI_HEAD + ending).responses.stream(model="m", input="hi") as stream:
        streamed = list(stream)
    assert [e.type for e in streamed][-3:] == ["response.output_text.delta", "error", "response.incomplete"]
    assert streamed[-3].snapshot == "Once upon"
    assert streamed[-1].response.incomplete_details.reason == "content_filter"


def test_reasoning_is_judged_like_the_answer_it_comes_with() -> None:
    delta = event({"type": "response.reasoning_text.delta", "item_id": "rs_1", "output_index": 0,
                   "content_index": 0, "delta": "plan the attack", "sequence_number": 3},
                  "response.reasoning_text.delta")
    assert rs.event_text(delta.rstrip(b"\n")) == "plan the attack"
    whole = orjson.dumps({"output": [
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "plan"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]})
    assert rs.answer_text(whole) == "plan\ndone"
