"""Keys, default limits and usage in the admin API.

Listing, showing, revoking and usage take any admin or user key: a user key sees itself and the
keys minted beneath it, and any other key is as unknown to it as one that does not exist."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from llmgw.api.appkeys import GATEWAY, KEYS
from llmgw.api.endpoints import Access, Call, Endpoint
from llmgw.core.errors import InvalidRequest
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.keys import (
    KeyCreated,
    KeyOut,
    KeyRequest,
    KeyRevoked,
    LiveCounts,
    UsageQuery,
    UsageRowOut,
)
from llmgw.core.types import Limits, as_utc

TAG = "keys"


async def create_key(call: Call[KeyRequest, None]) -> KeyCreated:
    # Any valid key may mint; KeyAdmin keeps a user key's children within its own grants.
    key, secret = await call.app[KEYS].create(call.body, call.caller)
    return KeyCreated(**dict(KeyOut.of(key)), key=secret)


async def list_keys(call: Call[None, None]) -> DataList[KeyOut]:
    return DataList(data=[KeyOut.of(k) for k in await call.app[KEYS].keys(call.key)])


async def get_key(call: Call[None, None]) -> KeyOut:
    key = KeyOut.of(await call.app[KEYS].find(call.params["id"], call.key))
    return key.model_copy(update={"live": await live_counts(call, key.id)})


async def live_counts(call: Call[Any, Any], limiter_id: str) -> LiveCounts | None:
    """What `limiter_id` (a key, or a team's) uses of its limits now, as admission counts it."""
    limiter = call.app[GATEWAY].limiter
    if limiter is None:
        return None
    return await limiter.live(limiter_id)


async def revoke_key(call: Call[None, None]) -> KeyRevoked:
    key, beneath = await call.app[KEYS].revoke(call.params["id"], call.key)
    return KeyRevoked(**dict(KeyOut.of(key)), revoked_beneath=beneath)


async def rotate_key(call: Call[None, None]) -> KeyCreated:
    key, secret = await call.app[KEYS].rotate(call.params["id"], call.caller)
    return KeyCreated(**dict(KeyOut.of(key)), key=secret)


async def get_default_limits(call: Call[None, None]) -> Limits:
    return await call.app[KEYS].default_limits()


async def put_default_limits(call: Call[Limits, None]) -> Limits:
    return await call.app[KEYS].set_default_limits(call.body)


async def usage(call: Call[None, UsageQuery]) -> DataList[UsageRowOut]:
    q = call.query
    rows = await call.app[KEYS].usage(q.key, q.model, day(q.since), call.key, q.team)
    names = {k.id: k.name for k in await call.app[KEYS].keys(call.key)}
    return DataList(data=[UsageRowOut(**dict(r), key_name=names.get(r.key_id, "")) for r in rows])


def day(since: str | None) -> str | None:
    """A `since` query as the UTC day it falls on: a date, or a time (UTC when it names no zone)."""
    if not since:
        return None
    try:
        return date.fromisoformat(since).isoformat()
    except ValueError:
        pass
    try:
        return as_utc(datetime.fromisoformat(since)).date().isoformat()
    except ValueError as exc:
        raise InvalidRequest("'since' must be a date (YYYY-MM-DD) or an ISO time",
                             param="since") from exc


CREATE_KEY = Endpoint("create_key", "POST", "/admin/v1/keys", "Create a key (shown once)", TAG,
                      create_key, access=Access.KEY, body=KeyRequest, returns=KeyCreated, status=201)
LIST_KEYS = Endpoint("list_keys", "GET", "/admin/v1/keys",
                     "List keys (a user key: itself and the keys minted beneath it)", TAG, list_keys,
                     access=Access.KEY, returns=DataList[KeyOut])
GET_KEY = Endpoint("get_key", "GET", "/admin/v1/keys/{id}", "Show a key", TAG, get_key,
                   access=Access.KEY, returns=KeyOut)
REVOKE_KEY = Endpoint("revoke_key", "POST", "/admin/v1/keys/{id}/revoke",
                      "Revoke a key and the keys minted beneath it", TAG, revoke_key,
                      access=Access.KEY, returns=KeyRevoked)
ROTATE_KEY = Endpoint("rotate_key", "POST", "/admin/v1/keys/{id}/rotate", "Rotate a key (shown once)",
                      TAG, rotate_key, returns=KeyCreated, status=201)
GET_DEFAULT_LIMITS = Endpoint("get_default_limits", "GET", "/admin/v1/limits/default",
                              "Default limits", TAG, get_default_limits, returns=Limits)
PUT_DEFAULT_LIMITS = Endpoint("put_default_limits", "PUT", "/admin/v1/limits/default",
                              "Set default limits", TAG, put_default_limits, body=Limits,
                              returns=Limits)
USAGE = Endpoint("usage", "GET", "/admin/v1/usage",
                 "Usage per key, model and day (a user key: its own and its minted keys')", TAG,
                 usage, access=Access.KEY, query=UsageQuery, returns=DataList[UsageRowOut])

ENDPOINTS: list[Endpoint[Any, Any]] = [
    CREATE_KEY, LIST_KEYS, GET_KEY, REVOKE_KEY, ROTATE_KEY, GET_DEFAULT_LIMITS, PUT_DEFAULT_LIMITS,
    USAGE,
]
