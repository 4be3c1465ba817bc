"""Reading and checking JSON request bodies."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import orjson
from aiohttp import web

from llmgw.core.errors import InvalidRequest, PayloadTooLarge

# A client that sends its body slower than this holds a connection, never a worker: it is cut.
BODY_TIMEOUT_S = 60.0
# Nesting and size bounds no OpenAI request comes near; past them the body is refused unread.
MAX_DEPTH = 64
MAX_ITEMS = 200_000


async def read_json(request: web.Request) -> tuple[bytes, dict[str, Any]]:
    """The raw body and its parsed object; bad JSON or a non-object body is a 400."""
    body = await read_body(request)
    return body, parse_json(body)


async def read_body(request: web.Request) -> bytes:
    """The raw body, within the app's bound (413) and BODY_TIMEOUT_S (400)."""
    try:
        # The app's client_max_size is enforced on the bytes actually read, not Content-Length.
        if request.content.is_eof():  # the whole body came with the headers: nothing to wait for
            body = await request.read()
        else:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadTooLarge(f"request body is too large: {exc.text}") from exc
    except TimeoutError as exc:
        raise InvalidRequest(f"request body did not arrive within {BODY_TIMEOUT_S:.0f}s") from exc
    return body


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body's object; bad JSON, a non-object, a body past the bounds or one naming a
    top-level key twice is a 400."""
    if not body:
        raise InvalidRequest("request body is empty; send a JSON object")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidRequest("request body must be a JSON object")
    # Counting brackets is C-fast; only a body that could break the bounds is walked.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH or len(body) > MAX_ITEMS:
        check_shape(payload)
    if _may_repeat_a_key(body, payload) and _repeats_a_key(body):
        # The parsed body keeps the last value, an upstream may read the first: what is checked
        # and what is forwarded must be the same request.
        raise InvalidRequest("request body repeats a top-level key; send each key once")
    return payload


def _may_repeat_a_key(body: bytes, payload: dict[str, Any]) -> bool:
    """False when no top-level key can be repeated: cheap, so most bodies skip the re-parse.

    Without `\\u` or `\\/` escapes a key has one spelling in the raw bytes (its canonical JSON
    escape), so a repeated key shows as that spelling followed by a colon twice (or more: nested
    objects count too, which only costs the exact check)."""
    if b"\\u" in body or b"\\/" in body:
        return True
    for name in payload:
        token = _TOKENS.get(name) or _token(name)
        # The count is C-fast; the pattern skips the same text as a value (`"role": "user"`).
        if body.count(token) > 1 and len(re.findall(re.escape(token) + rb"[ \t\n\r]*:", body)) > 1:
            return True
    return False


# The JSON spelling of top-level key names seen so far ("model", "messages", ...): the same few
# on every request. Bounded: a client sending new names each time only costs the encoding.
_TOKENS: dict[str, bytes] = {}
_TOKENS_MAX = 1024


def _token(name: str) -> bytes:
    token = orjson.dumps(name)
    if len(_TOKENS) < _TOKENS_MAX:
        _TOKENS[name] = token
    return token


def _repeats_a_key(body: bytes) -> bool:
    """Whether the top-level object names a key twice (the exact, slower check)."""
    repeated: list[bool] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        repeated.append(len({k for k, _ in items}) != len(items))
        return {}  # only the keys matter; the outermost object is the last one closed

    try:
        json.loads(body, object_pairs_hook=pairs)
    except ValueError as exc:
        raise InvalidRequest("request body is not valid JSON") from exc
    return repeated[-1]


def json_response(data: Any, status: int = 200) -> web.Response:
    """`data` as a JSON response."""
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def check_shape(payload: Any) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH or holding more than MAX_ITEMS values."""
    stack: list[tuple[Any, int]] = [(payload, 1)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"request body is nested deeper than {MAX_DEPTH} levels")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            seen += 1
            if seen > MAX_ITEMS:
                raise InvalidRequest(f"request body holds more than {MAX_ITEMS} values")
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
