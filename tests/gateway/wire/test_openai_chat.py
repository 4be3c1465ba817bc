"""Chat completions as the request path reads them: requests, answers' text, endings."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from llmgw.core.errors import GuardBlocked, InvalidRequest
from llmgw.gateway.wire import openai_chat as chat
from llmgw.gateway.wire.sse import SseSplitter, json_of
from llmgw.guard.prompts import Turn


def chunk(delta: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps({"object": "chat.completion.chunk",
                                     "choices": [{"index": 0, "delta": delta}]})


@pytest.mark.parametrize(("payload", "param"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
])
def test_a_bad_request_is_a_400_naming_the_field(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        chat.read_chat(payload)
    assert info.value.param == param


@pytest.mark.parametrize(("message", "param"), [
    ({"role": "wizard", "content": "hi"}, "messages.1.role"),
    ({"role": {"x": 1}, "content": "hi"}, "messages.1.role"),
    ({"content": "hi"}, "messages.1.role"),
    ("hi", "messages.1"),
])
def test_an_unknown_role_is_a_400_naming_the_field_as_openai_answers(message: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        chat.read_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}, message]})
    assert info.value.param == param and info.value.status == 400
    assert info.value.type == "invalid_request_error"


def test_each_role_openai_takes_reads_as_its_turn() -> None:
    ask = chat.read_chat({"model": "m", "messages": [
        {"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "function", "name": "f", "content": "42"}]})
    assert ask.turns == [Turn("system", "be brief"), Turn("user", "hi"), Turn("user", "42")]


def test_the_cap_is_max_completion_tokens_before_max_tokens() -> None:
    ask = chat.read_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                          "max_tokens": 50, "max_completion_tokens": 10, "stream": True})
    assert (ask.max_tokens, ask.stream) == (10, True)


def test_tool_calls_and_reasoning_are_judged_like_the_answer() -> None:
    whole = orjson.dumps({"choices": [{"message": {
        "role": "assistant", "content": "ok", "reasoning_content": "plan",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "rm", "arguments": '{"path": "/"}'}}]}}]})
    assert chat.answer_text(whole) == 'plan\nok\ntool rm: {"path": "/"}'
    assert chat.event_text(chunk({"reasoning_content": "plan"})) == "plan"
    assert chat.event_text(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"p'}}]})) == '{"p'
    ask = chat.read_chat({"model": "m", "messages": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "rm", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"}]})
    assert ask.turns == [Turn("assistant", "tool rm: {}"), Turn("user", "done")]


def test_a_blocked_stream_ends_with_a_content_filter_finish_an_error_and_done() -> None:
    events = SseSplitter().feed(chat.blocked_ending("m", GuardBlocked("unsafe", code="content_filter")))
    finish, error, done = events
    assert json_of(finish)["choices"][0]["finish_reason"] == "content_filter"  # type: ignore[index]
    assert json_of(error) == {"error": {"message": "unsafe", "type": "invalid_request_error",
                                        "param": None, "code": "content_filter"}}
    assert done == b"data: [DONE]"
