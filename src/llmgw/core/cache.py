"""The response cache's domain: when an answer may be kept and served again, for whom, and for
how long.

A cached answer is scoped to the tenant that paid for it (its team, or the key when it has no
team) unless its model or route says `shared`; it is kept only after the output guard passed it,
and a request served from it is still judged by the input guard and still needs the right to
call its model."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# A year: the longest a cached answer may live, as a bound on a typo rather than a policy.
MAX_TTL_S = 365 * 86400


class CacheMode(StrEnum):
    """Which answers a model or route serves from the cache."""

    OFF = "off"
    EXACT = "exact"  # the same normalised request
    SEMANTIC = "semantic"  # the same request, or one whose last user turn means nearly the same


class CacheWhen(StrEnum):
    """Which requests are cached (a client may always ask, `X-Llmgw-Cache: on`)."""

    # `temperature` 0 or a `seed`: a client that asked for the same answer every time.
    DETERMINISTIC = "deterministic"
    ALWAYS = "always"


class CacheSpec(BaseModel):
    """A model's or route's own cache setting; what it leaves unset is the install's."""

    # As core.types.Frozen (which imports this module).
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: CacheMode | None = None
    ttl_s: float | None = Field(default=None, gt=0, le=MAX_TTL_S)
    # Entries shared by every tenant that may call the model: only for answers that hold nothing
    # of one tenant's (a public FAQ model), never the default.
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Directives:
    """What the client said of the cache for this request."""

    lookup: bool = True  # False: `Cache-Control: no-cache`, answered fresh
    store: bool = True  # False: `Cache-Control: no-store`, not kept
    asked: bool = False  # `X-Llmgw-Cache: on`: cached whatever its temperature


NONE_SAID = Directives()
OFF = Directives(lookup=False, store=False)
