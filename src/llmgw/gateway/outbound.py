"""The upstream request for a call: which path, which bytes, and how its answer comes back."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from llmgw.gateway.call import UpstreamCall
from llmgw.gateway.wire import translate
from llmgw.gateway.wire.dialect import Wire
from llmgw.gateway.wire.translate import Translation


# Not frozen: made on every request, and a frozen dataclass sets each field through
# `object.__setattr__` (five times the cost). Nothing changes one once made.
@dataclass(slots=True)
class Outbound:
    """What goes to the upstream for a call: where, which bytes, and how its answer comes back."""

    path: str
    body: bytes
    translation: Translation | None
    wire: Wire  # the upstream's dialect


def outbound(call: UpstreamCall) -> Outbound:
    """The upstream request for `call`: the client's bytes unless the model must be renamed or
    the request translated."""
    path, translation = translate.plan(call.api, call.route.model)
    upstream_model = call.route.upstream_model
    if translation is not None:
        payload = translation.request(call.payload, upstream_model or call.ask.model)
        return Outbound(path, orjson.dumps(payload), translation, translation.wire)
    body = call.body
    if upstream_model and call.payload.get("model") != upstream_model:
        body = orjson.dumps({**call.payload, "model": upstream_model})
    return Outbound(path, body, None, call.wire)
