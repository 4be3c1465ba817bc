"""The response cache as the request path sees it: whether it may answer a request (`probe`),
the answer it kept (`get`), and keeping a new one off the client's wait (`keep`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmgw.core.cache import CacheMode, CacheSpec
from llmgw.core.errors import LlmgwError
from llmgw.core.settings import CacheSettings
from llmgw.core.types import ApiKey
from llmgw.gateway.cache.entry import CachedAnswer
from llmgw.gateway.cache.keys import Directives, bucket_key, cache_key, eligible, last_user_turn
from llmgw.gateway.cache.semantic import SemanticIndex, Vector
from llmgw.gateway.cache.store import AnswerStore, InMemory
from llmgw.gateway.call import Exchange
from llmgw.gateway.wire.dialect import Api

logger = logging.getLogger(__name__)

# Embeds a text as a unit vector (None when it cannot): `embed.Embedder`.
Embed = Callable[[str], Awaitable["Vector | None"]]

# The header that tells a client where its answer came from.
HIT = {"X-Llmgw-Cache": "hit"}
MISS = {"X-Llmgw-Cache": "miss"}


@dataclass(frozen=True, slots=True)
class Probe:
    """One request's place in the cache."""

    key: str
    name: str  # the model or route the request names: entries are bounded per name
    ttl_s: float
    lookup: bool  # whether a kept answer may answer it
    store: bool  # whether its own answer may be kept
    # Semantic: the bucket of requests that differ from it only in their last user turn, and
    # that turn's text; None for an exact look-up alone.
    bucket: str | None = None
    text: str = ""
    guarded: bool = False  # whether output policies cover it: its answer is kept once judged


def admits(probe: Probe, exchange: Exchange, status: int) -> bool:
    """Whether a missed request's answer may be kept, the one place this is said: the client
    let it be kept, it ended well (a 200, not blocked, its stream not broken by its upstream),
    and where output policies cover it, every judgment of it had each judge's verdict. A pass
    let through because a judge failed (`on_failure: open`), or a judgment that never ran, is
    not the guard's: such an answer is served once and never again."""
    return (probe.store and status == 200 and not exchange.blocked and not exchange.broke
            and (exchange.judged is True or not probe.guarded))


def scope_of(key: ApiKey, spec: CacheSpec | None) -> str:
    """Whose answers a request may be served: its team's, or its key's when it has no team;
    everyone's only where the model or route shares them. A team is named by its id, never
    reused: a team made again under a removed one's name is a new tenant."""
    if spec is not None and spec.shared:
        return "*"
    return f"team:{key.team_id}" if key.team_id is not None else f"key:{key.id}"


class ResponseCache:
    """This process's view of the install's response cache."""

    def __init__(self, settings: CacheSettings, store: AnswerStore,
                 embed: Embed | None = None) -> None:
        self.settings = settings
        self.store = store
        self._embed = embed  # None: no embedding model, so semantic look-ups are exact
        self.index = SemanticIndex(settings.max_entries)
        self.max_answer_bytes = settings.max_answer_kb * 1024
        self._puts: set[asyncio.Task[None]] = set()  # answers on their way to the store
        self.epochs: dict[str, str] = {}  # the install's, as this process last saw them
        # Whether the install's own setting turns the cache on (a model or route may still).
        self.on = settings.mode != CacheMode.OFF

    def probe(self, api: Api, payload: Mapping[str, Any], key: ApiKey, name: str,
              spec: CacheSpec | None, said: Directives, guard: Callable[[], str],
              turns: Callable[[], Sequence[tuple[str, str]]]) -> Probe | None:
        """Where the answer to this request is kept, or None when the cache is not for it (off
        for its model, a request that asks for a new answer every time, `Cache-Control`).
        `guard` names the output policies that pass what is kept, as they stand ("" for none):
        a changed policy makes every key it affects a new one."""
        mode = spec.mode if spec is not None and spec.mode is not None else self.settings.mode
        if mode == CacheMode.OFF or not (said.lookup or said.store):
            return None
        if not eligible(api, payload, self.settings.when, said):
            return None
        ttl = spec.ttl_s if spec is not None and spec.ttl_s is not None else self.settings.ttl_s
        epochs, outputs = self.epochs, guard()
        mark = f"{epochs.get('*', '')}:{epochs.get(name, '')}:{outputs}"
        scope = scope_of(key, spec)
        bucket, text = None, ""
        if mode == CacheMode.SEMANTIC and self._embed is not None:
            conversation = turns()
            at = last_user_turn(conversation)
            if at is not None:
                bucket = bucket_key(api, payload, conversation, at, scope, mark)
                text = conversation[at][1]
        return Probe(cache_key(api, payload, scope, mark), name, ttl, said.lookup, said.store,
                     bucket, text, guarded=outputs != "")

    def follow(self, epochs: dict[str, str]) -> None:
        """Take the install's cache epochs: a new one (a purge) empties this process's memory
        of the answers it makes unreachable."""
        if epochs is self.epochs or epochs == self.epochs:
            return
        old, self.epochs = self.epochs, epochs
        self.index.purge()  # its keys are of the old epochs: none would be found again
        if isinstance(self.store, InMemory):
            if epochs.get("*") != old.get("*"):
                self.store.cache.purge()
                return
            for name in {*epochs, *old}:
                if epochs.get(name) != old.get(name):
                    self.store.cache.purge(name)

    async def lookup(self, probe: Probe) -> tuple[CachedAnswer | None, Vector | None]:
        """The answer kept for `probe`, or for the request nearest it by meaning (semantic);
        None when there is none or the store does not answer (the request is then served by
        its upstream, as a miss). The vector is the request's embedding, for keeping its
        answer."""
        found = await self.get(probe.key)
        if found is not None or probe.bucket is None or self._embed is None:
            return found, None
        vector = await self._embed(probe.text)
        if vector is None:
            return None, None
        near = self.index.nearest(probe.bucket, vector)
        if near is None or near[1] < self.settings.similarity:
            return None, vector
        return await self.get(near[0]), vector

    async def get(self, key: str) -> CachedAnswer | None:
        """The answer kept under `key`, or None (also when the store does not answer)."""
        try:
            raw = await self.store.get(key)
        except LlmgwError as exc:
            logger.warning("response cache: look-up failed, answering from the upstream: %s",
                           exc.message)
            return None
        return None if raw is None else CachedAnswer.decode(raw)

    def keep(self, probe: Probe, answer: CachedAnswer, vector: Vector | None = None) -> None:
        """Keep `answer` for `probe`, in the background: the client has its answer already;
        with the request's `vector`, findable by meaning too."""
        task = asyncio.ensure_future(self._put(probe, answer, vector))
        self._puts.add(task)
        task.add_done_callback(self._puts.discard)

    async def _put(self, probe: Probe, answer: CachedAnswer, vector: Vector | None) -> None:
        try:
            await self.store.put(probe.key, probe.name, answer.encode(), probe.ttl_s)
        except LlmgwError as exc:
            logger.warning("response cache: an answer of %s was not kept: %s", probe.name,
                           exc.message)
            return
        if vector is not None and probe.bucket is not None:
            self.index.add(probe.bucket, vector, probe.key)

    async def settled(self) -> None:
        """Wait for the answers on their way to the store (tests; shutdown)."""
        while self._puts:
            await asyncio.wait(set(self._puts))

    async def close(self) -> None:
        """Keep the answers on their way, then let go of the store (at shutdown)."""
        await self.settled()
        self.store.close()
