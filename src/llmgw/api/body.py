"""Reading and checking JSON request bodies."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from llmgw.core.errors import InvalidRequest, PayloadTooLarge


async def read_json(request: web.Request) -> tuple[bytes, dict[str, Any]]:
    """The raw body and its parsed object; bad JSON or a non-object body is a 400."""
    try:
        # The app's client_max_size is enforced on the bytes actually read, not Content-Length.
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadTooLarge(f"request body is too large: {exc.text}") from exc
    if not body:
        raise InvalidRequest("request body is empty; send a JSON object")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidRequest("request body must be a JSON object")
    return body, payload


def require(payload: dict[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> None:
    """A 400 naming the field when it is missing or of the wrong type."""
    if name not in payload:
        raise InvalidRequest(f"'{name}' is a required property", param=name)
    value = payload[name]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _types(kind):
        raise InvalidRequest(f"'{name}' must be {what}", param=name)


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
