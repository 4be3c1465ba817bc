"""The cache in this process's memory: least recently used first out, within a bound on entries
per model and on bytes in all, each entry until its time to live runs out."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Entry:
    model: str
    value: bytes
    expires: float  # monotonic


class MemoryCache:
    """A bounded LRU of encoded answers by cache key. Not shared: each worker keeps its own."""

    def __init__(self, max_entries: int, max_bytes: int, now: Callable[[], float]) -> None:
        self.max_entries = max_entries  # per model
        self.max_bytes = max_bytes  # in all
        self._now = now
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # Each model's keys in the same order, so its least recently used is found at once.
        self._by_model: dict[str, OrderedDict[str, None]] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> bytes | None:
        """The value kept under `key`, now the most recently used; None when there is none or
        it expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._now():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        self._by_model[entry.model].move_to_end(key)
        return entry.value

    def put(self, key: str, model: str, value: bytes, ttl_s: float) -> None:
        """Keep `value` for `ttl_s`, making room by dropping the least recently used entries
        (of the same model first, when the model is at its bound)."""
        if len(value) > self.max_bytes:
            return
        if key in self._entries:
            self._drop(key)
        keys = self._by_model.get(model)
        if keys is not None and len(keys) >= self.max_entries:
            self._drop(next(iter(keys)))
        while self.bytes + len(value) > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = _Entry(model, value, self._now() + ttl_s)
        self._by_model.setdefault(model, OrderedDict())[key] = None
        self.bytes += len(value)

    def purge(self, model: str | None = None) -> int:
        """Drop every entry (of `model` only, when given); how many were dropped."""
        keys = list(self._entries) if model is None else list(self._by_model.get(model, ()))
        for k in keys:
            self._drop(k)
        return len(keys)

    def counts(self) -> dict[str, int]:
        """How many entries each model has (expired ones until they are looked up or pushed
        out)."""
        return {model: len(keys) for model, keys in self._by_model.items()}

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key)
        self.bytes -= len(entry.value)
        keys = self._by_model[entry.model]
        del keys[key]
        if not keys:
            del self._by_model[entry.model]
