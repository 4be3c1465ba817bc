"""Which requests the cache may answer, and the key it keeps their answers under: pure
functions of the request and the settings that apply to it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from llmgw.core.cache import NONE_SAID, OFF, CacheWhen, Directives
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.dialect import Api

__all__ = ["CACHED_APIS", "NONE_SAID", "OFF", "Directives", "bucket_key", "cache_key", "directives",
           "eligible", "last_user_turn"]

# The APIs whose answers are kept: generation, in every dialect llmgw replays.
CACHED_APIS = frozenset(api for api, spec in APIS.items() if spec.cacheable)

# Fields that never change the answer: how it is delivered, and who asked (for the provider's
# abuse tracking). Everything else the client sends is part of the key.
_IGNORED = frozenset({"stream", "stream_options", "user", "metadata", "store", "service_tier"})


def directives(cache_control: str | None, llmgw_cache: str | None) -> Directives:
    """The client's `Cache-Control` and `X-Llmgw-Cache` headers, read."""
    if cache_control is None and llmgw_cache is None:
        return NONE_SAID
    said = (llmgw_cache or "").strip().lower()
    if said == "off":
        return OFF
    words = {w.strip().lower() for w in (cache_control or "").split(",")}
    return Directives(lookup="no-cache" not in words, store="no-store" not in words,
                      asked=said == "on")


def eligible(api: Api, payload: Mapping[str, Any], when: CacheWhen, said: Directives) -> bool:
    """Whether the answer to this request may come from, or go to, the cache: an API it replays,
    one answer (no `n` > 1, no log probabilities it could not replay), and a request that asks
    for the same answer every time (or `when` is always, or the client asked)."""
    if api not in CACHED_APIS or payload.get("n", 1) != 1 or payload.get("logprobs"):
        return False
    if said.asked or when == CacheWhen.ALWAYS:
        return True
    temperature = payload.get("temperature")
    seed = payload.get("seed")
    return temperature == 0 or (isinstance(seed, int) and not isinstance(seed, bool))


# Where each dialect carries the conversation (a bucket replaces them with its turns).
_CONVERSATION = frozenset({"messages", "input", "system", "instructions", "prompt"})
# The content parts that are text, in each dialect: a bucket reads them as its turns' text.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def last_user_turn(turns: Sequence[tuple[str, str]]) -> int | None:
    """The index of the last user turn of (role, text) turns, or None when there is none."""
    for i in range(len(turns) - 1, -1, -1):
        if turns[i][0] == "user":
            return i
    return None


def bucket_key(api: Api, payload: Mapping[str, Any], turns: Sequence[tuple[str, str]], at: int,
               scope: str, guard: str) -> str:
    """The semantic bucket of a request: its key with the conversation read as (role, text)
    turns and the last user turn's text (`turns[at]`) left out, so requests that differ only in
    how they word that turn meet in it. Everything of the conversation that is not text (images,
    documents, files, audio, tool calls: the last user turn's too) is in it as it came: the
    same words about another image are another question."""
    rest = {k: v for k, v in payload.items() if k not in _CONVERSATION}
    rest["turns"] = [list(t) for i, t in enumerate(turns) if i != at]
    rest["parts"] = {k: _beyond_text(v) for k, v in payload.items() if k in _CONVERSATION}
    return cache_key(api, rest, scope, "semantic:" + guard)


def _beyond_text(value: Any) -> Any:
    """A conversation field (or a message's content) with its text taken out and all else kept.
    Text, a plain string or text parts alone, is None however it was put: the turns have it."""
    if isinstance(value, str):
        return None
    if isinstance(value, list):
        if all(isinstance(v, dict) and v.get("type") in _TEXT_PARTS for v in value):
            return None
        return [_beyond_text(v) for v in value]
    if isinstance(value, dict):
        if value.get("type") in _TEXT_PARTS:
            return {k: v for k, v in value.items() if k != "text"}
        return {k: _beyond_text(v) if k == "content" else v for k, v in value.items()}
    return value


def cache_key(api: Api, payload: Mapping[str, Any], scope: str, guard: str) -> str:
    """The key of this request's answer: its API and every field that changes the answer (the
    model or route it names among them), within `scope` (the tenant, or "*" for a shared
    model) and `guard` (the output policies that passed the answer, as they stand)."""
    fields = {k: v for k, v in payload.items() if k not in _IGNORED}
    digest = hashlib.sha256()
    for part in (api.value, scope, guard):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()
