"""What the cache keeps of an answer, and how it reads the way an answer ended."""

from __future__ import annotations

import pytest

from llmgw.gateway.cache.entry import CachedAnswer, finish_of


def test_an_answer_survives_its_encoding_and_foreign_bytes_are_no_answer() -> None:
    answer = CachedAnswer("The sea is wide. ✓", "length", 9, 5)
    assert CachedAnswer.decode(answer.encode()) == answer
    for raw in (b"", b"{}", b"[1, 2]", b'["x", "tool_calls", 1, 2]', b"\xff"):
        assert CachedAnswer.decode(raw) is None


@pytest.mark.parametrize(("raw", "finish"), [
    (b'{"choices": [{"finish_reason": "stop"}]}', "stop"),
    (b'{"choices": [{"finish_reason": "length"}]}', "length"),
    (b'{"choices": [{"finish_reason": "tool_calls"}]}', None),
    (b'{"choices": [{"finish_reason": "content_filter"}]}', None),
    (b'{"stop_reason": "end_turn"}', "stop"),
    (b'{"stop_reason": "max_tokens"}', "length"),
    (b'{"stop_reason": "tool_use"}', None),
    (b'data: {"finish_reason":null}\n\ndata: {"finish_reason":"stop"}\n\n', "stop"),
    (b'{"status": "in_progress"} {"status": "completed"}', "stop"),
    (b'{"output": [{"type": "function_call"}], "status": "completed"}', None),
    (b'{"choices": []}', None),
])
def test_how_an_answer_ended(raw: bytes, finish: str | None) -> None:
    assert finish_of(raw) == finish
