"""Finding a kept request by meaning: the embeddings of kept requests' last user turns, searched
for the nearest one within a bucket (everything else about the request the same: its model, its
other turns and fields, its tenant and output policies).

A small bucket is searched exactly (one matrix product); past `EXACT_UP_TO` entries it is an
HNSW graph (faiss), which stays well under a millisecond at 100k entries. Each process keeps its
own index; the answers themselves are in the cache's store."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]

# Up to this many entries a bucket is searched exactly: faster than a graph at this size.
EXACT_UP_TO = 2048
# HNSW's links per node and search breadth: recall above 0.99 at 100k for requests within a
# cache's threshold (bench/semantic.py).
HNSW_M = 32
HNSW_EF_SEARCH = 128


def unit(values: list[float]) -> Vector | None:
    """`values` as a unit vector (cosine similarity is then a dot product); None for one that
    is empty, not finite or all zero."""
    v = np.asarray(values, dtype=np.float32)
    if v.ndim != 1 or not v.size or not np.all(np.isfinite(v)):
        return None
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else None


class _Bucket:
    """One bucket's vectors and the cache keys they stand for, oldest first."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.keys: list[str] = []
        # The vectors, row by row, in a buffer that doubles when full (not copied per add).
        self._buf: Vector = np.empty((16, dim), dtype=np.float32)
        self._graph: Any = None  # a faiss HNSW index, past EXACT_UP_TO

    @property
    def _rows(self) -> Vector:
        return self._buf[: len(self.keys)]

    def add(self, vector: Vector, key: str) -> None:
        n = len(self.keys)
        if n == self._buf.shape[0]:
            grown = np.empty((2 * n, self.dim), dtype=np.float32)
            grown[:n] = self._buf
            self._buf = grown
        self._buf[n] = vector
        self.keys.append(key)
        if self._graph is not None:
            self._graph.add(vector[None, :])
        elif len(self.keys) > EXACT_UP_TO:
            self._build()

    def nearest(self, vector: Vector) -> tuple[str, float] | None:
        if not self.keys:
            return None
        if self._graph is None:
            scores = self._rows @ vector
            i = int(np.argmax(scores))
            return self.keys[i], float(scores[i])
        scores, found = self._graph.search(vector[None, :], 1)
        i = int(found[0][0])
        return (self.keys[i], float(scores[0][0])) if i >= 0 else None

    def keep_newest(self, n: int) -> None:
        """Drop all but the newest `n` entries (a graph cannot drop one: it is built anew)."""
        kept = self._rows[-n:].copy()
        self.keys = self.keys[-n:]
        self._buf = np.empty((max(16, 2 * n), self.dim), dtype=np.float32)
        self._buf[:n] = kept
        self._graph = None
        if len(self.keys) > EXACT_UP_TO:
            self._build()

    def _build(self) -> None:
        import faiss  # only where a bucket grows past EXACT_UP_TO

        # One query at a time: more threads would only take the cores the event loop and the
        # engines need (bench/semantic.py measures the same with one as with all).
        faiss.omp_set_num_threads(1)
        graph = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efSearch = HNSW_EF_SEARCH
        graph.add(self._rows)
        self._graph = graph


class SemanticIndex:
    """This process's embeddings of kept requests, by bucket, within bounds on the entries of
    one bucket and on the buckets (the least recently used go)."""

    def __init__(self, max_per_bucket: int, max_buckets: int = 4096) -> None:
        self.max_per_bucket = max_per_bucket
        self.max_buckets = max_buckets
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(b.keys) for b in self._buckets.values())

    def nearest(self, bucket: str, vector: Vector) -> tuple[str, float] | None:
        """The cache key of the kept request nearest `vector` in `bucket`, with its cosine
        similarity; None when the bucket is empty (or of another dimension)."""
        found = self._buckets.get(bucket)
        if found is None or found.dim != vector.shape[0]:
            return None
        self._buckets.move_to_end(bucket)
        return found.nearest(vector)

    def add(self, bucket: str, vector: Vector, key: str) -> None:
        """Index a kept request's `vector` under its cache `key`."""
        found = self._buckets.get(bucket)
        if found is None or found.dim != vector.shape[0]:
            found = self._buckets[bucket] = _Bucket(vector.shape[0])
            while len(self._buckets) > self.max_buckets:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(bucket)
        found.add(vector, key)
        if len(found.keys) > self.max_per_bucket:
            found.keep_newest(self.max_per_bucket // 2 or 1)

    def purge(self) -> None:
        self._buckets.clear()
