"""Chat completions answers and streams read back as the Responses API, checked with the official
`openai` SDK: its models parse every answer and event, and its own stream accumulator reads them."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from llmgw.gateway.wire.responses_chat import responses_to_chat
from llmgw.gateway.wire.responses_chat_answer import ChatStreamAsResponses, chat_answer_as_response
from llmgw.gateway.wire.sse import SseSplitter, json_of

STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
PARIS, ROME = '{"city":"Paris"}', '{"city":"Rome"}'


# --- whole answers ----------------------------------------------------------------------------


def chat_answer(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}


def test_a_text_answer_is_a_completed_response_with_its_text_and_usage() -> None:
    body = chat_answer_as_response(chat_answer({"content": "Hello there."}), "assistant")
    response = Response.model_validate(body)
    assert response.output_text == "Hello there."
    assert response.status == "completed"
    assert response.model == "assistant"
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")
    assert response.usage is not None
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (12, 5, 17)


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": 1e20, "completion_tokens": -4, "total_tokens": "many"},
    {"prompt_tokens": "nine", "completion_tokens": True, "prompt_tokens_details": "none",
     "completion_tokens_details": [1]},
])
def test_usage_an_upstream_lies_about_is_shown_as_zero_not_a_failure(usage: dict[str, Any]) -> None:
    # The meter counts the lie apart (clamped); the client still gets an answer its SDK reads.
    body = orjson.dumps(chat_answer_as_response({**chat_answer({"content": "Hi."}), "usage": usage}, "m"))
    response = sdk_client(body, "application/json").responses.create(model="m", input="Hi")
    assert response.output_text == "Hi." and response.usage is not None
    shown = response.usage
    assert (shown.input_tokens, shown.output_tokens, shown.total_tokens) == (0, 0, 0)


def test_tool_calls_are_function_call_items() -> None:
    body = chat_answer_as_response(chat_answer({"content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": PARIS}},
        {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": ROME}},
    ]}, "tool_calls"), "assistant")
    response = Response.model_validate(body)
    assert response.status == "completed"
    calls = [(i.type, getattr(i, "call_id", None), getattr(i, "arguments", None)) for i in response.output]
    assert calls == [("function_call", "call_a", PARIS), ("function_call", "call_b", ROME)]
    assert all(i.id and i.id.startswith("fc_") for i in response.output)


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"),
                                                ("content_filter", "content_filter")])
def test_a_cut_answer_is_incomplete_with_the_reason(finish: str, reason: str) -> None:
    body = chat_answer_as_response(chat_answer({"content": "Once upon"}, finish), "m")
    response = Response.model_validate(body)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == reason
    assert response.output_text == "Once upon"


def test_a_refusal_is_a_refusal_part() -> None:
    body = chat_answer_as_response(chat_answer({"content": None, "refusal": "I can't help with that."}), "m")
    message = Response.model_validate(body).output[0]
    assert message.type == "message"
    assert [(p.type, getattr(p, "refusal", None)) for p in message.content] == [
        ("refusal", "I can't help with that.")]


def test_reasoning_the_upstream_returns_is_a_reasoning_item_before_the_text() -> None:
    body = chat_answer_as_response(chat_answer({"content": "4", "reasoning_content": "2 and 2 make 4."}), "m")
    response = Response.model_validate(body)
    reasoning = response.output[0]
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert [c.text for c in reasoning.content or []] == ["2 and 2 make 4."]
    assert response.output_text == "4"


def sdk_client(body: bytes, content_type: str) -> openai.OpenAI:
    """The real SDK, answered by `body` for any request (no network)."""
    transport = httpx2.MockTransport(lambda _: httpx2.Response(200, content=body,
                                                             headers={"content-type": content_type}))
    return openai.OpenAI(api_key="k", base_url="http://gateway.test/v1",
                         http_client=httpx2.Client(transport=transport), max_retries=0)


def test_the_sdk_reads_a_translated_answer() -> None:
    body = orjson.dumps(chat_answer_as_response(chat_answer({"content": "Hi from chat."}), "assistant"))
    response = sdk_client(body, "application/json").responses.create(model="assistant", input="Hi")
    assert response.output_text == "Hi from chat."
    assert response.usage is not None and response.usage.total_tokens == 17


# --- streams ----------------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, Any] | None = None
          ) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                            "model": "up", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


def translate(upstream: list[bytes], piece: int = 7) -> list[bytes]:
    """The upstream stream cut into `piece`-byte reads, through the translator: its SSE bytes."""
    splitter, stream, out = SseSplitter(), ChatStreamAsResponses("assistant"), []
    raw = b"".join(upstream)
    for start in range(0, len(raw), piece):
        for ev in splitter.feed(raw[start:start + piece]):
            out += stream.feed(ev)
    for ev in splitter.rest():
        out += stream.feed(ev)
    return out + stream.end()


def events(sse: list[bytes]) -> list[Any]:
    """Every translated event, each parsed by the SDK's own union of stream events."""
    parsed = []
    for raw in sse:
        assert raw.endswith(b"\n\n")
        name = raw.split(b"\n", 1)[0].removeprefix(b"event: ").decode()
        data = json_of(raw)
        assert data is not None and data["type"] == name
        parsed.append(STREAM_EVENT.validate_python(data))
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    return parsed


TEXT_STREAM = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
               chunk({"content": "lo, "}), chunk({"content": "world."}), chunk({}, "stop"),
               chunk(usage=USAGE), b"data: [DONE]\n\n"]


def test_a_text_stream_arrives_in_deltas_and_ends_with_usage() -> None:
    parsed = events(translate(TEXT_STREAM))
    types = [e.type for e in parsed]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    deltas = [e.delta for e in parsed if e.type == "response.output_text.delta"]
    assert deltas == ["Hel", "lo, ", "world."]
    final = parsed[-1].response
    assert final.output_text == "Hello, world." and final.status == "completed" and final.model == "assistant"
    assert final.usage.input_tokens == 9 and final.usage.output_tokens == 4
    assert len({e.response.id for e in parsed if hasattr(e, "response")}) == 1


TOOL_STREAM = [
    chunk({"role": "assistant", "content": "Checking."}),
    chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                           "function": {"name": "weather", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                           "function": {"name": "weather", "arguments": '{"ci'}}]}),
    chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'ty":"Rome"}'}}]}),
    chunk({}, "tool_calls"), chunk(usage=USAGE), b"data: [DONE]\n\n",
]


def test_tool_call_arguments_reassemble_into_function_call_items() -> None:
    parsed = events(translate(TOOL_STREAM, piece=5))
    final = parsed[-1]
    assert final.type == "response.completed"
    items = final.response.output
    assert [i.type for i in items] == ["message", "function_call", "function_call"]
    assert final.response.output_text == "Checking."
    assert [(i.call_id, i.name, i.arguments) for i in items[1:]] == [
        ("call_a", "weather", '{"city":"Paris"}'), ("call_b", "weather", '{"city":"Rome"}')]
    for item in items[1:]:
        deltas = "".join(e.delta for e in parsed
                         if e.type == "response.function_call_arguments.delta" and e.item_id == item.id)
        done = [e.arguments for e in parsed
                if e.type == "response.function_call_arguments.done" and e.item_id == item.id]
        assert deltas == item.arguments and done == [item.arguments]


def test_a_call_named_after_its_first_fragment_still_carries_every_fragment() -> None:
    parsed = events(translate([
        chunk({"tool_calls": [{"index": 0, "id": "call_x", "function": {"arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ":1}"}}]}),
        chunk({}, "tool_calls"), b"data: [DONE]\n\n",
    ]))
    call = parsed[-1].response.output[0]
    assert (call.call_id, call.name, call.arguments) == ("call_x", "f", '{"a":1}')


def test_calls_without_an_index_are_told_apart_by_their_ids() -> None:
    parsed = events(translate([
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chunk({}, "tool_calls"),
    ]))
    assert [(i.call_id, i.name, i.arguments) for i in parsed[-1].response.output] == [
        ("c1", "f", "{}"), ("c2", "g", "{}")]


def test_a_stream_cut_by_the_token_limit_ends_incomplete() -> None:
    parsed = events(translate([chunk({"content": "Once upon"}), chunk({}, "length"), chunk(usage=USAGE)]))
    final = parsed[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.output_text == "Once upon" and final.response.usage.total_tokens == 13


def test_a_stream_that_breaks_off_ends_failed_not_completed() -> None:
    parsed = events(translate([chunk({"content": "Half an ans"})]))
    assert parsed[-1].type == "response.failed"
    assert parsed[-1].response.error.code == "server_error"
    assert parsed[-1].response.output[0].status == "incomplete"


def test_an_empty_stream_still_starts_and_completes() -> None:
    parsed = events(translate([chunk({}, "stop"), b"data: [DONE]\n\n"]))
    assert [e.type for e in parsed] == ["response.created", "response.in_progress", "response.completed"]
    assert parsed[-1].response.output == []


def test_a_refusal_streams_as_refusal_deltas() -> None:
    parsed = events(translate([chunk({"refusal": "I can't "}), chunk({"refusal": "help."}),
                               chunk({}, "stop")]))
    assert "".join(e.delta for e in parsed if e.type == "response.refusal.delta") == "I can't help."
    message = parsed[-1].response.output[0]
    assert message.content[0].type == "refusal" and message.content[0].refusal == "I can't help."


def test_reasoning_streams_as_its_own_item_before_the_answer() -> None:
    parsed = events(translate([
        chunk({"role": "assistant", "reasoning_content": "Paris is "}),
        chunk({"reasoning_content": "in France."}),
        chunk({"content": "France."}), chunk({}, "stop"), chunk(usage=USAGE), b"data: [DONE]\n\n"]))
    thought = "".join(e.delta for e in parsed if e.type == "response.reasoning_text.delta")
    assert thought == "Paris is in France."
    final = parsed[-1].response
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "Paris is in France."
    assert final.output_text == "France."
    done = [e.output_index for e in parsed if e.type == "response.output_item.done"]
    assert done == [0, 1]


def test_the_sdk_stream_accumulator_reads_a_translated_text_stream() -> None:
    body = b"".join(translate(TEXT_STREAM))
    with sdk_client(body, "text/event-stream").responses.stream(model="assistant", input="Hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["Hel", "lo, ", "world."]
    assert final.output_text == "Hello, world."
    assert final.usage is not None and final.usage.total_tokens == 13


def test_the_sdk_stream_accumulator_reads_translated_tool_calls() -> None:
    body = b"".join(translate(TOOL_STREAM))
    with sdk_client(body, "text/event-stream").responses.stream(model="assistant", input="Hi") as stream:
        snapshots = [e.snapshot for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert snapshots[-1] == '{"city":"Rome"}'
    assert [(i.call_id, i.arguments) for i in final.output if i.type == "function_call"] == [
        ("call_a", '{"city":"Paris"}'), ("call_b", '{"city":"Rome"}')]


def test_a_tool_round_trip_through_the_sdk_goes_back_upstream_as_chat() -> None:
    """The SDK's usual loop: the answer's items go back as input with the call's output."""
    tools: Any = [{"type": "function", "name": "weather", "description": "Weather now", "strict": True,
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"], "additionalProperties": False}}]
    answer = chat_answer_as_response(chat_answer({"content": "Checking.", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": PARIS}}]},
        "tool_calls"), "assistant")
    first = sdk_client(orjson.dumps(answer), "application/json").responses.create(
        model="assistant", input="Weather in Paris?", tools=tools, store=False)
    call = next(i for i in first.output if i.type == "function_call")

    sent: list[dict[str, Any]] = []

    def upstream(request: httpx2.Request) -> httpx2.Response:
        sent.append(orjson.loads(request.content))
        return httpx2.Response(200, content=orjson.dumps(answer),
                               headers={"content-type": "application/json"})

    client = openai.OpenAI(api_key="k", base_url="http://gateway.test/v1", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(upstream)))
    history: Any = [{"role": "user", "content": "Weather in Paris?"}, *first.output,
                    {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}]
    client.responses.create(model="assistant", input=history, tools=tools, store=False)

    chat = responses_to_chat(sent[0], "upstream")
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": PARIS}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18 C"},
    ]
    assert chat["tools"][0]["function"]["strict"] is True


def test_the_sdk_stream_accumulator_reads_reasoning_text_and_calls_together() -> None:
    upstream = [chunk({"reasoning_content": "Need the weather."}), *TOOL_STREAM]
    with sdk_client(b"".join(translate(upstream)), "text/event-stream").responses.stream(
            model="assistant", input="Hi") as stream:
        final = stream.get_final_response()
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output_text == "Checking."
