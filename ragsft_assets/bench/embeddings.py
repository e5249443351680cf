"""``ragsft bench embeddings``: exact top-k distractors over 100,000 vectors against numpy, in one run.

A synthetic passage set shaped like sentence embeddings: ``size`` (default 100,000) unit vectors of
384 dimensions (all-MiniLM-L6-v2's), drawn around 2,000 topic centroids so that neighbours are
close as real ones are, with 2% exact duplicate texts and examples of one to three passages. It
times ``long_context.neighbours.nearest_neighbours`` (faiss's flat inner-product kernel, with the
exclusions) on 2,000 query passages, then, on the same queries in the same run:

- numpy float32 brute force (one matmul per block of queries + ``argpartition``, no exclusions):
  what one would write by hand; ``ratio`` = our queries/s over its queries/s;
- the exact reference ``brute_force_neighbours`` (float64, the same exclusions and tie rule):
  ``topk_identical`` = every query's top-k list (indices and scores) is the same as ours.

It projects the time for 1M passages, every passage a query (the RAFT use: distractors for all):
the per-query time is fitted as a + b * corpus size from the full size and a quarter of it,
both measured here with the same threads.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ragsft_assets.bench import machine_values
from ragsft_assets.long_context.neighbours import brute_force_neighbours, nearest_neighbours

DIM = 384
K = 8
N_QUERIES = 2000
CENTROIDS = 2000
FULL_PASSAGES = 1_000_000


def synthetic_passages(n: int, seed: int = 0) -> tuple[np.ndarray, list[int], list[int]]:
    """(unit vectors, keys, groups): clustered vectors, 2% duplicates of earlier rows, 1-3 rows an example."""
    rng = np.random.default_rng(seed)
    centroids = rng.normal(size=(CENTROIDS, DIM)).astype(np.float32)
    x = centroids[rng.integers(0, CENTROIDS, size=n)] + rng.normal(scale=0.8, size=(n, DIM)).astype(
        np.float32
    )
    keys = list(range(n))
    dup = rng.choice(np.arange(1, n), size=n // 50, replace=False)
    for i in dup.tolist():
        j = int(rng.integers(0, i))
        x[i], keys[i] = x[j], keys[j]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    groups = np.cumsum(rng.integers(0, 3, size=n) == 0).tolist()  # runs of rows share an example
    return np.ascontiguousarray(x, dtype=np.float32), keys, groups


def numpy_float32_topk(x: np.ndarray, queries: np.ndarray, k: int, block: int = 256) -> np.ndarray:
    """The hand-written baseline: float32 scores, top-k by argpartition then sort (itself included)."""
    out = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), block):
        scores = x[queries[s : s + block]] @ x.T
        part = np.argpartition(-scores, k, axis=1)[:, :k]
        top = np.take_along_axis(scores, part, axis=1)
        out[s : s + block] = np.take_along_axis(part, np.argsort(-top, axis=1, kind="stable"), axis=1)
    return out


def _time_ours(
    x: np.ndarray, keys: list[int], groups: list[int], queries: np.ndarray
) -> tuple[float, object]:
    t0 = time.perf_counter()
    res = nearest_neighbours(x, K, keys=keys, groups=groups, query_rows=queries)
    return time.perf_counter() - t0, res


def run(size: int | None = None, workdir: str | None = None) -> dict[str, object]:
    """Run the benchmark; returns the ordered key=value results."""
    import faiss

    n = size or 100_000
    print(f"building {n} synthetic {DIM}-dim passage vectors ({CENTROIDS} topics, 2% duplicates)", flush=True)
    x, keys, groups = synthetic_passages(n)
    rng = np.random.default_rng(1)
    queries = np.sort(rng.choice(n, size=min(N_QUERIES, n), replace=False))

    ours_s, ours = _time_ours(x, keys, groups, queries)
    print(
        f"ours (faiss flat IP + exclusions): {len(queries)} queries {ours_s:.2f}s, "
        f"{ours.fallbacks} by brute force",
        flush=True,
    )

    t0 = time.perf_counter()
    numpy_float32_topk(x, queries, K)
    np_s = time.perf_counter() - t0
    print(f"numpy float32 brute force: {len(queries)} queries {np_s:.2f}s", flush=True)

    t0 = time.perf_counter()
    ref = brute_force_neighbours(x, K, keys=keys, groups=groups, query_rows=queries)
    ref_s = time.perf_counter() - t0
    same = int(((ours.indices == ref.indices).all(axis=1) & (ours.scores == ref.scores).all(axis=1)).sum())
    print(
        f"exact numpy reference (float64, exclusions): {ref_s:.2f}s; identical top-{K}: {same}/{len(queries)}",
        flush=True,
    )

    quarter = max(n // 4, K + 10)
    xq, kq, gq = x[:quarter], keys[:quarter], groups[:quarter]
    # as many queries as on the full set: the fit compares per-query times of equal batches
    small_q = np.sort(
        np.random.default_rng(2).choice(quarter, size=min(len(queries), quarter), replace=False)
    )
    small_s, _ = _time_ours(xq, kq, gq, small_q)
    per_q_full = ours_s / len(queries)
    per_q_small = small_s / max(len(small_q), 1)
    per_row = max((per_q_full - per_q_small) / max(n - quarter, 1), 0.0)
    per_q_1m = per_q_full + per_row * (FULL_PASSAGES - n)
    projected_s = per_q_1m * FULL_PASSAGES
    print(
        f"ours on {quarter} passages: {len(small_q)} queries {small_s:.2f}s; "
        f"1M passages x 1M queries projected {projected_s / 3600:.1f} h",
        flush=True,
    )

    return {
        "ratio": round(np_s / ours_s, 2),
        "queries_per_s": round(len(queries) / ours_s, 1),
        "numpy_float32_queries_per_s": round(len(queries) / np_s, 1),
        "ratio_exact_reference": round(ref_s / ours_s, 2),
        "passages": n,
        "dim": DIM,
        "k": K,
        "queries": len(queries),
        "fallbacks": ours.fallbacks,
        "projected_1m_passages_h": round(projected_s / 3600, 2),
        "projected_1m_index_gb": round(FULL_PASSAGES * DIM * 4 / 1e9, 2),
        "topk_identical": same == len(queries),
        "topk_identical_queries": len(queries),
        "faiss_threads": faiss.omp_get_max_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        **machine_values("faiss-cpu"),
    }
