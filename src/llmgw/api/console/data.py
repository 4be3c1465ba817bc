"""The console reads and writes through the admin API's own endpoints as the visitor (a key, or a
person by their role), so it can never show or do more than the API allows them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from llmgw.api.endpoints import Endpoint, invoke
from llmgw.core.types import ApiKey
from llmgw.core.users import Person


async def call(app: web.Application, caller: ApiKey | Person, ep: Endpoint[Any, Any], *,
               body: BaseModel | dict[str, Any] | None = None, query: Mapping[str, str] | None = None,
               params: Mapping[str, str] | None = None) -> Any:
    """`ep`'s answer to `caller` (a key, or a person by their role), in the JSON shape the HTTP
    API gives it (templates read one shape); the same access check, validation and errors as
    over HTTP."""
    return _json(await invoke(ep, app, caller, body=body, query=query, params=params))


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value
