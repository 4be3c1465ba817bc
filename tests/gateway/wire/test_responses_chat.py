"""Responses requests carried over chat completions: what is carried, what is dropped as a hint,
and what is refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire.responses_chat import responses_to_chat

PARIS, ROME = '{"city":"Paris"}', '{"city":"Rome"}'


def test_instructions_and_a_string_input_become_a_system_and_a_user_message() -> None:
    chat = responses_to_chat({"model": "assistant", "instructions": "Be brief.", "input": "Hi",
                              "max_output_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stream": True},
                             "upstream-model")
    assert chat == {
        "model": "upstream-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 64, "temperature": 0.2, "top_p": 0.9,
        "stream": True, "stream_options": {"include_usage": True},
    }


def test_multi_turn_items_keep_their_roles_and_text() -> None:
    chat = responses_to_chat({"model": "m", "input": [
        {"role": "developer", "content": "Answer in French."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Bonjour", "annotations": []}]},
        {"role": "user", "content": "And goodbye?"},
    ]}, "m")
    assert chat["messages"] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "And goodbye?"},
    ]
    assert "stream" not in chat


def test_a_function_call_round_trip_becomes_one_assistant_turn_and_tool_messages() -> None:
    weather = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    chat = responses_to_chat({
        "model": "m",
        "tools": [{"type": "function", "name": "weather", "description": "Weather now",
                   "parameters": weather, "strict": True}],
        "tool_choice": {"type": "function", "name": "weather"},
        "parallel_tool_calls": True,
        "input": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "weather",
             "arguments": '{"city":"Paris"}', "status": "completed"},
            {"type": "function_call", "call_id": "call_b", "name": "weather", "arguments": '{"city":"Rome"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "18 C"},
            {"type": "function_call_output", "call_id": "call_b",
             "output": [{"type": "input_text", "text": "21 C"}]},
        ],
    }, "m")
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "weather", "description": "Weather now", "parameters": weather, "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat["parallel_tool_calls"] is True
    assert chat["messages"][1:] == [
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": PARIS}},
            {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": ROME}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "21 C"},
    ]


def test_a_call_with_no_text_before_it_is_an_assistant_message_without_content() -> None:
    chat = responses_to_chat({"model": "m", "input": [
        {"role": "user", "content": "Time?"},
        {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "noon"},
        {"type": "function_call", "call_id": "c2", "name": "now", "arguments": "{}"},
    ]}, "m")
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert chat["messages"][1]["content"] is None
    assert [c["id"] for c in chat["messages"][3]["tool_calls"]] == ["c2"]


def test_text_an_assistant_wrote_after_its_calls_stays_with_the_calls() -> None:
    chat = responses_to_chat({"model": "m", "input": [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": PARIS},
        {"role": "assistant", "content": "Looking it up."},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
        {"role": "assistant", "content": "18 C in Paris."},
    ]}, "m")
    assert [(m["role"], m.get("content")) for m in chat["messages"]] == [
        ("user", "Weather?"), ("assistant", "Looking it up."), ("tool", "18 C"),
        ("assistant", "18 C in Paris.")]
    assert chat["messages"][1]["tool_calls"][0]["id"] == "c1"


def test_images_given_by_url_become_image_parts() -> None:
    chat = responses_to_chat({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
    ]}]}, "m")
    assert chat["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
    ]}]


def test_json_schema_output_and_reasoning_effort_are_carried() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    chat = responses_to_chat({"model": "m", "input": "Count",
                              "reasoning": {"effort": "low", "summary": "auto"},
                              "text": {"format": {"type": "json_schema", "name": "count", "schema": schema,
                                                  "strict": True}, "verbosity": "low"}}, "m")
    assert chat["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "count", "schema": schema, "strict": True}}
    assert chat["reasoning_effort"] == "low"


def test_allowed_tools_offer_only_those_tools() -> None:
    tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("a", "b", "c")]
    chat = responses_to_chat({"model": "m", "input": "x", "tools": tools, "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "b"}]}}, "m")
    assert [t["function"]["name"] for t in chat["tools"]] == ["b"]
    assert chat["tool_choice"] == "required"


def test_hints_that_do_not_change_the_answer_are_dropped() -> None:
    chat = responses_to_chat({
        "model": "m", "input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"role": "user", "content": "Hi"},
        ],
        "metadata": {"team": "a"}, "user": "u1", "store": False, "safety_identifier": "s",
        "prompt_cache_key": "k", "service_tier": "auto", "truncation": "auto",
        "include": ["reasoning.encrypted_content"], "previous_response_id": None, "background": False,
    }, "m")
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(("change", "param"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"max_tool_calls": 2}, "max_tool_calls"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"include": ["message.output_text.logprobs"]}, "include[0]"),
    ({"some_new_field": 1}, "some_new_field"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "file_search", "vector_store_ids": ["v"]}]},
     "tools[1].type"),
    ({"tools": [{"type": "computer_use_preview", "display_width": 1, "display_height": 1,
                 "environment": "linux"}]}, "tools[0].type"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "see"},
                                             {"type": "input_image", "file_id": "file_1"}]}]},
     "input[0].content[1].file_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_image", "image_url": "https://x/y.png"}]}]}, "input[0].output[0]"),
    ({"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x"}]}]},
     "input[0].content[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "detail": "auto"}]}]},
     "input[0].content[0].image_url"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"instructions": ["Be brief."]}, "instructions"),
    ({"input": 3}, "input"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
])
def test_what_chat_cannot_carry_is_refused_naming_the_field(change: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        responses_to_chat({"model": "m", "input": "Hi", **change}, "m")
    assert refused.value.param == param
    assert refused.value.status == 400


def test_a_refusal_names_known_types_but_never_repeats_what_else_the_client_sent() -> None:
    with pytest.raises(InvalidRequest) as named:
        responses_to_chat({"model": "m", "input": "Hi", "tools": [{"type": "web_search"}]}, "m")
    assert "'web_search'" in named.value.message
    with pytest.raises(InvalidRequest) as unnamed:
        responses_to_chat({"model": "m", "input": "Hi", "tools": [{"type": "Bearer sk-Secret-123"}]}, "m")
    assert "Secret" not in unnamed.value.message and unnamed.value.param == "tools[0].type"
