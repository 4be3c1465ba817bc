"""Reading the console's HTML forms into API request bodies: numbers, lists and empty fields."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from llmgw.core.errors import InvalidRequest

Form = Mapping[str, Any]


async def read(request: web.Request) -> Form:
    """The posted form's fields (the CSRF token aside)."""
    form = await request.post()
    return {k: v for k, v in form.items() if k != "csrf_token" and isinstance(v, str)}


def text(form: Form, name: str, *, required: bool = False) -> str | None:
    """A text field, stripped; None when empty (a 400 naming it when required)."""
    value = str(form.get(name, "")).strip()
    if not value:
        if required:
            raise InvalidRequest(f"'{name}' is required", param=name)
        return None
    return value


def integer(form: Form, name: str, *, required: bool = False) -> int | None:
    """A whole number field; None when empty."""
    value = text(form, name, required=required)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a whole number", param=name) from None


def number(form: Form, name: str) -> float | None:
    """A number field; None when empty."""
    value = text(form, name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a number", param=name) from None


def names(form: Form, name: str) -> list[str]:
    """A comma- or space-separated list field."""
    return [part for part in str(form.get(name, "")).replace(",", " ").split() if part]


def words(form: Form, name: str) -> list[str]:
    """A shell-quoted list field (engine arguments), split as a shell would split it."""
    try:
        return shlex.split(str(form.get(name, "")))
    except ValueError as exc:
        # shlex says what is wrong ("No closing quotation"), not where: the field is named.
        raise InvalidRequest(f"'{name}' is not shell-quoted right: {str(exc).lower()}",
                             param=name) from None


def pairs(form: Form, name: str) -> dict[str, str]:
    """`k=v` pairs, comma- or space-separated."""
    out = {}
    for part in names(form, name):
        k, sep, v = part.partition("=")
        if not sep or not k:
            raise InvalidRequest(f"'{name}' takes key=value pairs", param=name)
        out[k] = v
    return out


def grants(form: Form) -> dict[str, list[str]] | None:
    """MCP tool grants from the `tools_allow` and `tools_deny` list fields; None when both are
    empty (the API's default holds)."""
    allow, deny = names(form, "tools_allow"), names(form, "tools_deny")
    return {"allow": allow, "deny": deny} if allow or deny else None


def given(**fields: Any) -> dict[str, Any]:
    """The fields that were filled in (None: left out of the request, so the API's default holds)."""
    return {k: v for k, v in fields.items() if v is not None}
