"""How long the semantic cache takes to find a kept request by meaning, at 1k, 10k and 100k
kept requests in one bucket: the look-up alone (the embedding is the embedding model's time).

    .venv/bin/python bench/semantic.py [--sizes 1000 10000 100000] [--dim 768] [--queries 2000]

Vectors are random unit vectors (the worst case for a graph: no clusters to follow); each
query is a kept vector with noise that puts it at cosine similarity about 0.95 from it (where a
cache's threshold sits: a request farther away is a miss whatever the index finds), so the right
answer is known and the recall is measured beside the time. Prints a table and writes
bench/results/semantic.json."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # noqa: E402  (bench/record.py, beside this file)
from llmgw.gateway.cache.semantic import EXACT_UP_TO, SemanticIndex  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def measure(size: int, dim: int, queries: int, rng: np.random.Generator) -> dict[str, float]:
    rows = rng.normal(size=(size, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = SemanticIndex(max_per_bucket=size + 1)
    started = time.perf_counter()
    for i in range(size):
        index.add("bucket", rows[i], f"k{i}")
    build_s = time.perf_counter() - started
    picks = rng.integers(0, size, queries)
    # Noise of norm 0.33 around a unit vector: cosine about 1 / sqrt(1 + 0.33²) = 0.95.
    noise = rng.normal(scale=0.33 / np.sqrt(dim), size=(queries, dim)).astype(np.float32)
    noisy = rows[picks] + noise
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    times, right = [], 0
    for q, pick in zip(noisy, picks, strict=True):
        t0 = time.perf_counter()
        found = index.nearest("bucket", q)
        times.append((time.perf_counter() - t0) * 1e6)
        right += found is not None and found[0] == f"k{pick}"
    times.sort()
    return {"size": size, "p50_us": round(statistics.median(times), 1),
            "p99_us": round(times[int(len(times) * 0.99) - 1], 1),
            "recall": round(right / queries, 4), "build_s": round(build_s, 2),
            "graph": size > EXACT_UP_TO}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args()
    load = round(os.getloadavg()[0], 2)
    rng = np.random.default_rng(7)
    results = [measure(size, args.dim, args.queries, rng) for size in args.sizes]
    lines = [f"# semantic cache look-up, {args.dim} dimensions, {args.queries} queries per size", "",
             "| kept requests | search | p50 µs | p99 µs | recall | index built in s |",
             "|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['size']:,} | {'HNSW graph' if r['graph'] else 'exact'} | {r['p50_us']} "
              f"| {r['p99_us']} | {r['recall']:.1%} | {r['build_s']} |" for r in results]
    print("\n".join(lines))  # noqa: T201 - a bench prints its figures
    out = ROOT / "bench" / "results" / "semantic.json"
    record.write(out, "semantic", record.meta(load, dim=args.dim, queries=args.queries,
                                              command="python bench/semantic.py"),
                 {"sizes": results})
    print(f"written {out.relative_to(ROOT)}")  # noqa: T201


if __name__ == "__main__":
    main()
