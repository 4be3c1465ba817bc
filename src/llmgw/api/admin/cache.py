"""The response cache in the admin API: `/admin/v1/cache` and a model's own setting."""

from __future__ import annotations

from typing import Any

from llmgw.api.admin.models import NAME, by
from llmgw.api.appkeys import CACHE, CATALOG
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.protocol.cache import (
    CacheStatsOut,
    CacheStatsQuery,
    ModelCacheRequest,
    PurgeOut,
    PurgeRequest,
)
from llmgw.core.types import Model

TAG = "cache"


async def cache_stats(call: Call[None, CacheStatsQuery]) -> CacheStatsOut:
    return await call.app[CACHE].stats(call.query.days)


async def purge_cache(call: Call[PurgeRequest, None]) -> PurgeOut:
    return await call.app[CACHE].purge(call.body.model)


async def set_model_cache(call: Call[ModelCacheRequest, None]) -> Model:
    model = await call.app[CATALOG].set_cache(call.params["name"], call.body.cache, by(call.key))
    return model.shown()


CACHE_STATS = Endpoint("cache_stats", "GET", "/admin/v1/cache",
                       "The response cache: requests, hits and saved tokens per model", TAG,
                       cache_stats, query=CacheStatsQuery, returns=CacheStatsOut)
PURGE_CACHE = Endpoint("purge_cache", "POST", "/admin/v1/cache/purge",
                       "Drop the answers kept for one model (or route), or all of them", TAG,
                       purge_cache, body=PurgeRequest, returns=PurgeOut,
                       example={"model": "gemma3-270m"})
SET_MODEL_CACHE = Endpoint("set_model_cache", "PUT", f"/admin/v1/models/{NAME}/cache",
                           "Set a model's own response cache (null: the install's)", TAG,
                           set_model_cache, body=ModelCacheRequest, returns=Model,
                           example={"cache": {"mode": "exact", "ttl_s": 3600}})

ENDPOINTS: list[Endpoint[Any, Any]] = [CACHE_STATS, PURGE_CACHE, SET_MODEL_CACHE]
