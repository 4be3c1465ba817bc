"""The answer file a server's workers share: what one keeps the others find, each model within
its bound (the oldest out first), each answer until its time to live ends, purged for all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.gateway.cache.file import InFile


@pytest.fixture
def clock() -> list[float]:
    return [1000.0]


@pytest.fixture
def workers(tmp_path: Path, clock: list[float]) -> Iterator[list[InFile]]:
    """Two workers' handles on one file."""
    made = [InFile(tmp_path / "answers.db", 3, lambda: clock[0]) for _ in range(2)]
    yield made
    for f in made:
        f.close()


async def test_an_answer_one_worker_keeps_the_other_finds(workers: list[InFile]) -> None:
    one, other = workers
    await one.put("k", "m", b"answer", 60)
    assert await other.get("k") == b"answer" and await other.get("nope") is None
    assert await other.count() == {"m": 1}


async def test_a_model_keeps_at_most_its_bound_the_oldest_going_first(
        workers: list[InFile], clock: list[float]) -> None:
    one, other = workers
    for i in range(5):
        clock[0] += 1
        await (one if i % 2 else other).put(f"k{i}", "m", b"x", 60)
    await one.put("n0", "n", b"x", 60)
    assert [await one.get(f"k{i}") for i in range(5)] == [None, None, b"x", b"x", b"x"]
    assert await other.count() == {"m": 3, "n": 1}


async def test_an_answer_lives_until_its_time_to_live_ends(workers: list[InFile],
                                                           clock: list[float]) -> None:
    one, _ = workers
    await one.put("k", "m", b"x", 10)
    clock[0] += 9.9
    assert await one.get("k") == b"x"
    clock[0] += 0.1
    assert await one.get("k") is None and await one.count() == {}


async def test_a_purge_empties_one_model_or_all_for_every_worker(workers: list[InFile]) -> None:
    one, other = workers
    for i in range(2):
        await one.put(f"m{i}", "m", b"x", 60)
    await one.put("n0", "n", b"x", 60)
    assert await other.purge("m") == 2 and await one.get("m0") is None
    assert await other.purge(None) == 1 and await one.count() == {}
