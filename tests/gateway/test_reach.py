"""How an upstream's failure is classified, and how long a retry waits."""

from __future__ import annotations

import pytest

from llmgw.core.routes import FailOn, Retry
from llmgw.gateway.reach import backoff_s, classify


@pytest.mark.parametrize(("status", "body", "kind"), [
    (429, b"", FailOn.RATE_LIMITED),
    (500, b"", FailOn.SERVER_ERROR),
    (503, b"<html>", FailOn.SERVER_ERROR),
    (401, b"", FailOn.SERVER_ERROR),  # llmgw's own credentials refused: the target is broken
    (302, b"", FailOn.SERVER_ERROR),
    (400, b'{"error":{"code":"context_length_exceeded","message":"x"}}', FailOn.CONTEXT_LENGTH),
    (400, b'{"error":{"type":"exceed_context_size_error","message":"x"}}', FailOn.CONTEXT_LENGTH),
    (400, b'{"type":"error","error":{"message":"prompt is too long: 9000 tokens"}}',
     FailOn.CONTEXT_LENGTH),
    (400, b'{"error":{"message":"temperature out of range"}}', None),
    (404, b"", None),
    (422, b"", None),
])
def test_classify(status: int, body: bytes, kind: FailOn | None) -> None:
    assert classify(status, body) == kind


def test_backoff_doubles_to_its_cap_and_yields_to_a_longer_retry_after() -> None:
    rule = Retry(attempts=5, backoff_ms=200, max_backoff_ms=1000)
    assert [backoff_s(rule, n, None) for n in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff_s(rule, 0, 3) == 3
    assert backoff_s(rule, 3, 0.5) == 1.0
