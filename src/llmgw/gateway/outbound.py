"""The upstream request for a call: which path, which bytes, and how its answer comes back."""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.gateway.call import Outbound, UpstreamCall
from llmgw.gateway.upstream.table import Serving
from llmgw.gateway.wire import translate
from llmgw.gateway.wire.dialect import Api, Wire

__all__ = ["Outbound", "outbound", "request"]


def outbound(call: UpstreamCall) -> Outbound:
    """The upstream request for `call`: the client's bytes unless the model must be renamed or
    the request translated."""
    return request(call.route, call.api, call.body, call.payload, call.ask.model, call.wire)


def request(route: Serving, api: Api, body: bytes, payload: dict[str, Any], model: str,
            wire: Wire) -> Outbound:
    """The upstream request to `route` for a request of `api` (`body` as it came, `payload` the
    same parsed) naming `model`, in the client's dialect `wire`."""
    path, translation = translate.plan(api, route.model)
    upstream_model = route.upstream_model
    if translation is not None:
        translated = translation.request(payload, upstream_model or model)
        return Outbound(path, orjson.dumps(translated), translation, translation.wire)
    if upstream_model and payload.get("model") != upstream_model:
        body = orjson.dumps({**payload, "model": upstream_model})
    return Outbound(path, body, None, wire)
