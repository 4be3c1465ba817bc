"""The in-memory cache: within its bounds on entries per model and on bytes, least recently
used out first, each entry until its time to live ends (on a fake clock)."""

from __future__ import annotations

from llmgw.core.clock import FakeClock
from llmgw.gateway.cache.memory import MemoryCache


def lru(max_entries: int = 3, max_bytes: int = 1000) -> tuple[MemoryCache, FakeClock]:
    clock = FakeClock()
    return MemoryCache(max_entries, max_bytes, clock.monotonic), clock


def test_a_model_keeps_at_most_its_bound_the_least_recently_used_going_first() -> None:
    cache, _ = lru(max_entries=3)
    for k in "abc":
        cache.put(k, "m", b"x", 60)
    assert cache.get("a") == b"x"  # now the most recently used
    cache.put("d", "m", b"x", 60)
    assert cache.get("b") is None and [cache.get(k) for k in "acd"] == [b"x"] * 3
    assert cache.counts() == {"m": 3}


def test_the_bound_is_per_model() -> None:
    cache, _ = lru(max_entries=2)
    for k in "ab":
        cache.put(k, "m", b"x", 60)
        cache.put(k + "2", "n", b"x", 60)
    cache.put("c", "m", b"x", 60)
    assert cache.counts() == {"m": 2, "n": 2} and cache.get("a2") == b"x"


def test_the_bytes_stay_within_their_bound_whatever_is_put() -> None:
    cache, _ = lru(max_entries=1000, max_bytes=100)
    for i in range(500):
        cache.put(f"k{i}", f"m{i % 7}", b"y" * (i % 40 + 1), 60)
        assert cache.bytes <= 100
    assert cache.bytes == sum(len(v) for v in (cache.get(f"k{i}") for i in range(500)) if v)
    cache.put("big", "m", b"z" * 101, 60)  # larger than the whole bound: not kept
    assert cache.get("big") is None and cache.bytes <= 100


def test_an_entry_lives_until_its_time_to_live_ends() -> None:
    cache, clock = lru()
    cache.put("a", "m", b"x", 10)
    clock.advance(9.9)
    assert cache.get("a") == b"x"
    clock.advance(0.1)
    assert cache.get("a") is None and len(cache) == 0


def test_putting_a_key_again_replaces_it() -> None:
    cache, _ = lru()
    cache.put("a", "m", b"old", 60)
    cache.put("a", "m", b"newer", 60)
    assert cache.get("a") == b"newer" and cache.bytes == 5 and cache.counts() == {"m": 1}


def test_a_purge_empties_one_model_or_all() -> None:
    cache, _ = lru()
    cache.put("a", "m", b"x", 60)
    cache.put("b", "n", b"x", 60)
    assert cache.purge("m") == 1 and cache.counts() == {"n": 1}
    assert cache.purge() == 1 and len(cache) == 0 and cache.bytes == 0
