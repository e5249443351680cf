"""Exact inner-product nearest neighbours of passages (the RAFT distractors), with faiss-cpu.

``nearest_neighbours(vectors, k, keys=..., groups=...)`` gives each query passage the ``k``
passages whose vectors have the largest inner product with its own (cosine, for L2-normalised
embeddings), leaving out:

- the passage itself and its duplicates (rows with the same ``key``, e.g. the text's hash);
- every passage of the same example (rows with the same ``group``), and their duplicates;
- repeated texts among the neighbours: a text appears once, as its lowest row index.

The order is defined exactly, so results do not depend on faiss's internals, on BLAS or on how
the work is blocked: score = the float64 inner product of the float32 vectors rounded to
``SCORE_DECIMALS`` decimals, descending; a tie goes to the lower passage index.

How: faiss's exact flat inner-product kernel (``faiss.knn``, what ``IndexFlatIP`` searches with,
without copying the vectors into an index) ranks candidates in float32, ``query_block`` queries at
a time, so beyond the vectors themselves memory stays at ``query_block x fetch`` candidates (faiss
tiles its own score blocks) whatever the corpus size. The candidates are then re-scored in
float64 and ranked as above. Whenever float32 rounding could have hidden a
candidate that would tie or beat the k-th one (the k-th score is within the float32 error bound of
the best score faiss did not return), or too few candidates survive the exclusions, that query is
answered by the exact brute force instead (``brute_force_neighbours``, the reference the tests and
``ragsft bench embeddings`` compare with), so the result is always the exact one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

_log = logging.getLogger(__name__)

SCORE_DECIMALS = 6  # float32 embeddings carry ~7 significant digits; below this, scores are noise
QUERY_BLOCK = 4096
MARGIN = 8  # extra candidates fetched per query beyond k + its exclusions


@dataclass(slots=True)
class Neighbours:
    """Top-k per query row: ``indices[q]`` (passage rows, -1 padded) and their rounded ``scores[q]``."""

    indices: np.ndarray  # (n_queries, k) int64
    scores: np.ndarray  # (n_queries, k) float64, NaN where indices is -1
    fallbacks: int = 0  # queries answered by the brute force (float32 near-ties or exclusions)
    wall_s: float = 0.0


@dataclass(slots=True)
class _Layout:
    """Unique texts, their representative rows, and each query's excluded unique texts."""

    rep_rows: np.ndarray  # (u,) lowest row index of each unique key, ascending
    row_unique: np.ndarray  # (n,) unique id of each row
    excluded: list[np.ndarray]  # per query: unique ids it may not get


def _layout(
    n: int, keys: Sequence[Hashable] | None, groups: Sequence[Hashable] | None, query_rows: np.ndarray
) -> _Layout:
    if keys is None:
        row_unique = np.arange(n, dtype=np.int64)
        rep_rows = np.arange(n, dtype=np.int64)
    else:
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} vectors")
        first: dict[Hashable, int] = {}
        row_unique = np.empty(n, dtype=np.int64)
        reps: list[int] = []
        for i, key in enumerate(keys):
            u = first.get(key)
            if u is None:
                u = first[key] = len(reps)
                reps.append(i)
            row_unique[i] = u
        rep_rows = np.asarray(reps, dtype=np.int64)
    group_uniques: dict[Hashable, set[int]] = {}
    if groups is not None:
        if len(groups) != n:
            raise ValueError(f"{len(groups)} groups for {n} vectors")
        for i, g in enumerate(groups):
            group_uniques.setdefault(g, set()).add(int(row_unique[i]))
    excluded = []
    for q in query_rows.tolist():
        ex = {int(row_unique[q])}
        if groups is not None:
            ex |= group_uniques[groups[q]]
        excluded.append(np.fromiter(sorted(ex), dtype=np.int64, count=len(ex)))
    return _Layout(rep_rows, row_unique, excluded)


def _rank(scores64: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of candidates: rounded score descending, then row ascending."""
    rounded = np.round(scores64, SCORE_DECIMALS)
    order = np.lexsort((rows, -rounded))[:k]
    return rows[order], rounded[order]


def brute_force_neighbours(
    vectors: np.ndarray,
    k: int,
    *,
    keys: Sequence[Hashable] | None = None,
    groups: Sequence[Hashable] | None = None,
    query_rows: Sequence[int] | None = None,
    query_block: int = 256,
) -> Neighbours:
    """The reference: every score in float64 with numpy, exclusions as a mask, the same order.

    Same arguments and result as ``nearest_neighbours``; memory ``query_block x n`` float64.
    """
    t0 = time.perf_counter()
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    qrows = (
        np.arange(len(x), dtype=np.int64) if query_rows is None else np.asarray(query_rows, dtype=np.int64)
    )
    lay = _layout(len(x), keys, groups, qrows)
    reps64 = x[lay.rep_rows].astype(np.float64)
    out_i = np.full((len(qrows), k), -1, dtype=np.int64)
    out_s = np.full((len(qrows), k), np.nan)
    for start in range(0, len(qrows), query_block):
        block = qrows[start : start + query_block]
        scores = x[block].astype(np.float64) @ reps64.T
        for j in range(len(block)):
            row = scores[j]
            keep = np.ones(len(row), dtype=bool)
            keep[lay.excluded[start + j]] = False
            cand = np.flatnonzero(keep)
            idx, sc = _rank(row[cand], lay.rep_rows[cand], k)
            out_i[start + j, : len(idx)] = idx
            out_s[start + j, : len(idx)] = sc
    return Neighbours(out_i, out_s, 0, time.perf_counter() - t0)


def nearest_neighbours(
    vectors: np.ndarray,
    k: int,
    *,
    keys: Sequence[Hashable] | None = None,
    groups: Sequence[Hashable] | None = None,
    query_rows: Sequence[int] | None = None,
    query_block: int = QUERY_BLOCK,
    threads: int | None = None,
    log: logging.Logger | None = None,
) -> Neighbours:
    """Exact top-``k`` inner-product neighbours of each query row among the passage rows.

    Args:
        vectors: (n, d) passage embeddings (float32; normalise them for cosine).
        k: neighbours per query.
        keys: per row, what makes two rows duplicates (e.g. the passage text's hash); None: none are.
        groups: per row, its example id: rows of the query's example are excluded; None: only itself.
        query_rows: rows to answer for (default: every row).
        query_block: queries searched at once (memory: ``query_block x fetch`` candidates).
        threads: faiss OpenMP threads (None: faiss's default).
        log: where progress lines go.

    Returns:
        ``Neighbours`` with ``indices[q]`` in rank order (score desc, row asc), -1 where fewer than k
        passages are eligible.
    """
    import faiss

    t0 = time.perf_counter()
    log = log or _log
    if threads:
        faiss.omp_set_num_threads(threads)
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"vectors must be 2-D, got shape {x.shape}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    qrows = (
        np.arange(len(x), dtype=np.int64) if query_rows is None else np.asarray(query_rows, dtype=np.int64)
    )
    lay = _layout(len(x), keys, groups, qrows)
    # no duplicates: search the caller's array itself (faiss.knn copies nothing)
    reps = x if len(lay.rep_rows) == len(x) else x[lay.rep_rows]
    n_unique, dim = reps.shape
    max_excluded = max((len(e) for e in lay.excluded), default=0)
    fetch = min(n_unique, k + max_excluded + MARGIN)
    # A float32 inner product is off by at most ~dim * 2^-24 * |q| |x| (summation error bound);
    # doubled, plus the rounding to SCORE_DECIMALS, so a candidate faiss left out cannot be missed.
    max_norm = float(np.linalg.norm(reps, axis=1).max()) if n_unique else 0.0
    q_norms = np.linalg.norm(x[qrows], axis=1) if len(qrows) else np.zeros(0)

    out_i = np.full((len(qrows), k), -1, dtype=np.int64)
    out_s = np.full((len(qrows), k), np.nan)
    fallback: list[int] = []
    last_log = time.perf_counter()
    for start in range(0, len(qrows), query_block):
        block = qrows[start : start + query_block]
        # faiss's exact flat kernel (what IndexFlatIP.search runs), tiled internally, no index copy
        d32, i32 = (
            faiss.knn(x[block], reps, fetch, metric=faiss.METRIC_INNER_PRODUCT) if fetch else (None, None)
        )
        for j, q in enumerate(block.tolist()):
            qi = start + j
            if not fetch:
                continue
            cu = i32[j]
            cu = cu[(cu >= 0) & ~np.isin(cu, lay.excluded[qi])]
            scores64 = reps[cu].astype(np.float64) @ x[q].astype(np.float64)
            idx, sc = _rank(scores64, lay.rep_rows[cu], k)
            if fetch < n_unique:  # faiss left some out: could one of them tie or beat our k-th?
                err = 2.0 * dim * 2.0**-24 * float(q_norms[qi]) * max_norm + 10.0**-SCORE_DECIMALS
                if len(idx) < k or sc[-1] <= float(d32[j, -1]) + err:
                    fallback.append(qi)
                    continue
            out_i[qi, : len(idx)] = idx
            out_s[qi, : len(idx)] = sc
        now = time.perf_counter()
        if now - last_log >= 10.0:
            last_log = now
            done = start + len(block)
            log.info(f"neighbours: {done}/{len(qrows)} queries, {done / (now - t0):.0f} queries/s")
    if fallback:
        exact = brute_force_neighbours(x, k, keys=keys, groups=groups, query_rows=qrows[fallback])
        out_i[fallback] = exact.indices
        out_s[fallback] = exact.scores
    wall = time.perf_counter() - t0
    log.info(
        f"neighbours: top-{k} of {len(qrows)} queries over {n_unique} unique passages in {wall:.1f}s"
        f" ({len(fallback)} by brute force)"
    )
    return Neighbours(out_i, out_s, len(fallback), wall)
