"""The error a client gets for an upstream's error answer, decided from its status, headers, body."""

from __future__ import annotations

from datetime import timedelta
from email.utils import format_datetime

import orjson
import pytest

from llmgw.core.errors import UpstreamError, UpstreamRateLimited, UpstreamRefused
from llmgw.gateway.upstream_errors import MAX_RETRY_AFTER_S, retry_after, upstream_failure
from tests.factories import NOW


@pytest.mark.parametrize(("value", "seconds"), [
    ("12", 12), (" 12 ", 12), ("0", 1), ("", 1), (None, 1), ("-5", 1), ("1.5", 1), ("soon", 1),
    ("9" * 40, MAX_RETRY_AFTER_S),
    (format_datetime(NOW + timedelta(seconds=120), usegmt=True), 120),
    (format_datetime(NOW - timedelta(days=1), usegmt=True), 1),  # already passed
    (format_datetime(NOW + timedelta(days=30), usegmt=True), MAX_RETRY_AFTER_S),
    ("Wed, 99 Foo 2026 99:99:99 GMT", 1),
])
def test_retry_after_is_read_as_seconds_or_a_date_and_bounded(value: str | None, seconds: int) -> None:
    assert retry_after(value, NOW) == seconds


def test_a_429_is_rate_limited_with_the_upstreams_retry_after() -> None:
    err = upstream_failure("r-1", 429, {"Retry-After": "20"}, b"quota of sk-secret exceeded", NOW)
    assert isinstance(err, UpstreamRateLimited) and err.retry_after_s == 20
    assert err.status == 429 and "sk-secret" not in err.message


@pytest.mark.parametrize("status", [401, 403, 407, 500, 502, 503, 301, 307, 101, 600])
def test_statuses_that_are_not_the_clients_fault_are_502(status: int) -> None:
    body = orjson.dumps({"error": {"message": "key sk-abc…wxyz is wrong", "type": "auth",
                                   "code": "invalid_api_key"}})
    err = upstream_failure("r-1", status, {}, body, NOW)
    assert type(err) is UpstreamError and err.status == 502 and "sk-abc" not in err.message


@pytest.mark.parametrize("body", [
    b"", b"oops", b"[1, 2]", b'{"error": "bad"}', b'{"error": {"type": "x"}}',
    b'{"detail": "Not Found"}', b"\xff\xfe",
])
def test_a_client_error_that_is_not_in_openais_shape_is_502(body: bytes) -> None:
    assert type(upstream_failure("r-1", 404, {}, body, NOW)) is UpstreamError


def test_an_openai_shaped_client_error_keeps_status_type_param_and_code_only() -> None:
    body = orjson.dumps({"error": {"message": "you said: my secret prompt", "type": "invalid_request_error",
                                   "param": "messages", "code": "context_length_exceeded"}})
    err = upstream_failure("r-1", 413, {}, body, NOW)
    assert isinstance(err, UpstreamRefused)
    assert (err.status, err.type, err.param, err.code) == (413, "invalid_request_error", "messages",
                                                           "context_length_exceeded")
    assert "secret" not in err.message
