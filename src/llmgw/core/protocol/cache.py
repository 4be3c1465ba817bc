"""The response cache on the wire: what it holds and spares, purging it, a model's setting."""

from __future__ import annotations

from pydantic import BaseModel, Field

from llmgw.core.cache import CacheMode, CacheSpec


class CacheModelStats(BaseModel):
    """One model's (or route's) use of the cache over the days asked for."""

    model: str
    mode: CacheMode = Field(description="the mode its requests get: its own, else the install's")
    own: CacheSpec | None = Field(default=None, description="its own setting (`ctl model cache`, "
                                                            "`ctl route cache`); null: the install's")
    requests: int = Field(description="every request of the model, answered from the cache or not")
    hits: int = Field(description="requests answered from the cache")
    hit_rate: float = Field(description="hits over requests, 0 to 1")
    saved_tokens: int = Field(description="tokens the hits spared the upstream")
    entries: int | None = Field(default=None, description="answers kept now")


class CacheStatsOut(BaseModel):
    """The response cache: where it keeps answers and what it spared."""

    mode: CacheMode = Field(description="the install's `[cache] mode`; a model or route may set "
                                        "its own (each model's `mode`)")
    store: str = Field(description="`redis` (shared by every worker and server), `file` (shared "
                                   "by a server's workers) or `memory` (one process's)")
    since: str = Field(description="the first day (UTC) the figures count")
    models: list[CacheModelStats] = Field(description="each model or route that has its own "
                                                      "setting, was asked or keeps answers")


class CacheStatsQuery(BaseModel):
    """Which days the figures count."""

    days: int = Field(default=1, ge=1, le=366, description="today and the days before it")


class PurgeRequest(BaseModel):
    """What to purge: one model's (or route's) answers, or every answer."""

    model: str | None = None


class PurgeOut(BaseModel):
    """What a purge dropped."""

    model: str | None
    purged: int = Field(description="answers dropped from the store this server uses (Redis: "
                                    "every server's)")


class ModelCacheRequest(BaseModel):
    """A model's own cache setting; null gives it back to the install's `[cache]`."""

    cache: CacheSpec | None = None
