"""What a client gets when an upstream answers with an error: never the upstream's body as it came.

- 429: `upstream_rate_limited` with the upstream's Retry-After, bounded to [1, MAX_RETRY_AFTER_S].
- another 4xx whose body is an OpenAI-shaped error: the same status with the error's `type`,
  `param` and `code` when each is a short identifier, and a message of llmgw's own. The
  upstream's message is dropped: providers quote the request back in it (OpenAI's validation
  errors do), and a 401's message can show part of the provider key.
- 401, 403 and 407 (the upstream refused llmgw's own credentials, not the client's), any other
  4xx body, 5xx, redirects and other statuses: 502 `upstream_error`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import orjson

from llmgw.core.errors import LlmgwError, UpstreamError, UpstreamRateLimited, UpstreamRefused

# An error body is read up to this size; an error in OpenAI's shape is far smaller.
MAX_ERROR_BODY = 64 * 1024
# A hostile or confused upstream must not park clients for days.
MAX_RETRY_AFTER_S = 3600
_CREDENTIALS = frozenset({401, 403, 407})
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,128}")


def upstream_failure(
    name: str, status: int, headers: Mapping[str, str], body: bytes, now: datetime | None = None
) -> LlmgwError:
    """The error to answer for an upstream's non-2xx answer (see the module docstring)."""
    if status == 429:
        return UpstreamRateLimited(f"upstream {name} is rate limiting requests; try again later",
                                   retry_after(headers.get("Retry-After"), now or datetime.now(UTC)))
    if 400 <= status < 500 and status not in _CREDENTIALS:
        fields = _openai_error(body)
        if fields is not None:
            type_, param, code = fields
            return UpstreamRefused(f"upstream {name} refused the request ({status} {code or type_})",
                                   status, type_, param=param, code=code)
    if status in _CREDENTIALS:
        return UpstreamError(f"upstream {name} refused llmgw's credentials ({status})")
    return UpstreamError(f"upstream {name} answered {status}")


def retry_after(value: str | None, now: datetime) -> int:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), in [1, MAX]; 1 if
    absent or unreadable."""
    seconds = 1.0
    if value:
        value = value.strip()
        if value.isdigit():
            seconds = float(value[:12])
        else:
            try:
                seconds = (parsedate_to_datetime(value) - now).total_seconds()
            except (TypeError, ValueError, IndexError, OverflowError):
                seconds = 1.0
    return int(min(max(math.ceil(seconds), 1), MAX_RETRY_AFTER_S))


def _openai_error(body: bytes) -> tuple[str, str | None, str | None] | None:
    """(type, param, code) of an `{"error": {"message": ..., ...}}` body, or None."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    type_ = _identifier(error.get("type")) or "invalid_request_error"
    return type_, _identifier(error.get("param")), _identifier(error.get("code"))


def _identifier(value: object) -> str | None:
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None
