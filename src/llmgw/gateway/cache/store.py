"""Where the cache keeps answers: one interface, in this process's memory (here), in a file its
server's workers share (`file`), or in the install's Redis (`shared`)."""

from __future__ import annotations

from typing import Protocol

from llmgw.gateway.cache.memory import MemoryCache


class AnswerStore(Protocol):
    """Encoded answers by cache key, each under the model (or route) it answers for."""

    # Where: "memory" (this process's), "file" (a server's workers') or "redis" (the install's).
    kind: str

    async def get(self, key: str) -> bytes | None:
        """The answer kept under `key`, or None."""
        ...

    async def put(self, key: str, model: str, value: bytes, ttl_s: float) -> None:
        """Keep `value` for `ttl_s` within the model's bound."""
        ...

    async def purge(self, model: str | None) -> int:
        """Drop every answer (of `model`, when given); how many were dropped."""
        ...

    async def count(self) -> dict[str, int]:
        """How many answers are kept, per model."""
        ...

    def close(self) -> None:
        """Let go of what it holds (at shutdown)."""
        ...


class InMemory:
    """The store of one process with no Redis: its own bounded LRU."""

    kind = "memory"

    def __init__(self, cache: MemoryCache) -> None:
        self.cache = cache

    async def get(self, key: str) -> bytes | None:
        return self.cache.get(key)

    async def put(self, key: str, model: str, value: bytes, ttl_s: float) -> None:
        self.cache.put(key, model, value, ttl_s)

    async def purge(self, model: str | None) -> int:
        return self.cache.purge(model)

    async def count(self) -> dict[str, int]:
        return self.cache.counts()

    def close(self) -> None:
        self.cache.purge()
