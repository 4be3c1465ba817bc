"""The data plane's one handler. Both HTTP edges, the hot edge's own connections
(`api.hot_edge`) and aiohttp's (`api.data_plane`), parse a generation request into a
`DataRequest` and write the `Reply` this answers; what lies between (the caller's credentials,
the body's JSON, the gateway) is here, once. The edges keep only their transports: reading,
bounds and deadlines, and writing."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.api.body import parse_json
from llmgw.core.types import ApiKey
from llmgw.gateway.call import Reply
from llmgw.gateway.service import Gateway
from llmgw.gateway.wire.dialect import Api


@dataclass(frozen=True, slots=True)
class DataRequest:
    """One generation request as an edge parsed it: its dialect, the caller's key, the body."""

    api: Api
    key: ApiKey
    body: bytes
    request_id: str
    started: float | None  # monotonic time it arrived


def credentials(authorization: str | None, api_key: str | None) -> str | None:
    """The `Authorization` value to authenticate: the header, else Anthropic's `x-api-key` as
    a bearer token."""
    if authorization is None and api_key is not None:
        return "Bearer " + api_key
    return authorization


async def handle(gateway: Gateway, request: DataRequest) -> Reply:
    """The gateway's reply to `request` (a 400 when its body is no JSON object)."""
    return await gateway.forward(request.key, request.api, request.body, parse_json(request.body),
                                 request.request_id, request.started)
