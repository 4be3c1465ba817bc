"""Checking the fields of a parsed request body, with 400s that name the field.

Every dialect module validates its own requests with these, so a client learns which field is
wrong in the same words whichever API it called.
"""

from __future__ import annotations

from typing import Any

from llmgw.core.errors import InvalidRequest

# Far above any context window llmgw serves; a larger value is a client bug, not a request.
MAX_TOKENS = 1_000_000


def is_int(value: Any) -> bool:
    """An integer that is not a boolean (JSON `true` parses as a Python int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An integer or a float, not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def required_str(payload: dict[str, Any], name: str) -> str:
    """The string field `name`; a 400 when it is missing or not a string."""
    if name not in payload:
        raise InvalidRequest(f"'{name}' is a required property", param=name)
    value = payload[name]
    if not isinstance(value, str):
        raise InvalidRequest(f"'{name}' must be a string", param=name)
    return value


def required(payload: dict[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> None:
    """A 400 naming the field when it is missing or not of `kind` (booleans never pass as numbers)."""
    if name not in payload:
        raise InvalidRequest(f"'{name}' is a required property", param=name)
    value = payload[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and not _allows_bool(kind)):
        raise InvalidRequest(f"'{name}' must be {what}", param=name)


def token_count(payload: dict[str, Any], name: str, *, required: bool = False) -> int | None:
    """The token cap `name` (an integer from 1 to MAX_TOKENS), None when absent and optional."""
    value = payload.get(name)
    if value is None:
        if required:
            raise InvalidRequest(f"'{name}' is a required property", param=name)
        return None
    if not is_int(value) or not 1 <= value <= MAX_TOKENS:
        raise InvalidRequest(f"'{name}' must be an integer from 1 to {MAX_TOKENS}", param=name)
    return int(value)


def flag(payload: dict[str, Any], name: str) -> bool:
    """The boolean field `name`, False when absent or null."""
    value = payload.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean", param=name)
    return value


def optional(payload: dict[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> None:
    """A 400 when `name` is present, not null, and not of `kind` (booleans never pass as numbers)."""
    value = payload.get(name)
    if value is None:
        return
    if not isinstance(value, kind) or (isinstance(value, bool) and not _allows_bool(kind)):
        raise InvalidRequest(f"'{name}' must be {what}", param=name)


def optional_number(payload: dict[str, Any], name: str) -> None:
    """A 400 when `name` is present, not null, and not a number."""
    value = payload.get(name)
    if value is not None and not is_number(value):
        raise InvalidRequest(f"'{name}' must be a number", param=name)


def string_list(payload: dict[str, Any], name: str) -> None:
    """A 400 when `name` is present, not null, and not an array of strings."""
    value = payload.get(name)
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"'{name}' must be an array of strings", param=name)


def _allows_bool(kind: type | tuple[type, ...]) -> bool:
    return bool in (kind if isinstance(kind, tuple) else (kind,))
