"""Finding a kept request by meaning, from plain vectors: the nearest in a bucket, exactly in a
small one and through the HNSW graph in a large one, within the bounds on a bucket and on the
buckets."""

from __future__ import annotations

import numpy as np
import pytest

from llmgw.gateway.cache.semantic import EXACT_UP_TO, SemanticIndex, Vector, unit


def vectors(n: int, dim: int = 32, seed: int = 7) -> list[Vector]:
    rng = np.random.default_rng(seed)
    out = []
    for row in rng.normal(size=(n, dim)):
        v = unit(row.tolist())
        assert v is not None
        out.append(v)
    return out


def test_a_unit_vector_is_made_of_usable_values_only() -> None:
    v = unit([3.0, 4.0])
    assert v is not None and np.allclose(v, [0.6, 0.8])
    for bad in ([], [0.0, 0.0], [1.0, float("nan")], [float("inf")]):
        assert unit(bad) is None


def test_the_nearest_in_a_small_bucket_is_found_exactly() -> None:
    index = SemanticIndex(max_per_bucket=100)
    vs = vectors(50)
    for i, v in enumerate(vs):
        index.add("b", v, f"k{i}")
    key, score = index.nearest("b", vs[17]) or ("", 0.0)
    assert key == "k17" and score == pytest.approx(1.0, abs=1e-5)
    assert index.nearest("other", vs[0]) is None


def test_a_large_bucket_is_searched_through_its_graph() -> None:
    index = SemanticIndex(max_per_bucket=10 * EXACT_UP_TO)
    vs = vectors(EXACT_UP_TO + 500)
    for i, v in enumerate(vs):
        index.add("b", v, f"k{i}")
    # Each vector finds itself: the graph holds every entry, those added after it was built too.
    probes = [0, EXACT_UP_TO // 2, EXACT_UP_TO + 1, EXACT_UP_TO + 499]
    assert [(index.nearest("b", vs[i]) or ("",))[0] for i in probes] == [f"k{i}" for i in probes]


def test_a_full_bucket_keeps_its_newest_half() -> None:
    index = SemanticIndex(max_per_bucket=10)
    vs = vectors(11)
    for i, v in enumerate(vs):
        index.add("b", v, f"k{i}")
    assert len(index) == 5
    assert (index.nearest("b", vs[10]) or ("",))[0] == "k10"
    assert (index.nearest("b", vs[0]) or ("",))[0] != "k0"


def test_the_least_recently_used_bucket_goes_past_the_bound() -> None:
    index = SemanticIndex(max_per_bucket=10, max_buckets=2)
    v = vectors(1)[0]
    index.add("a", v, "ka")
    index.add("b", v, "kb")
    index.nearest("a", v)  # a is now the most recently used
    index.add("c", v, "kc")
    assert index.nearest("b", v) is None and index.nearest("a", v) == ("ka", pytest.approx(1.0))


def test_a_vector_of_another_dimension_starts_the_bucket_anew() -> None:
    index = SemanticIndex(max_per_bucket=10)
    index.add("b", vectors(1, dim=8)[0], "short")
    wide = vectors(1, dim=16)[0]
    assert index.nearest("b", wide) is None
    index.add("b", wide, "wide")
    assert index.nearest("b", wide) == ("wide", pytest.approx(1.0))
