"""Inner-product nearest neighbours of passages (the RAFT distractors), with faiss-cpu.

``nearest_neighbours(vectors, k, keys=..., groups=...)`` gives each query passage the ``k``
passages whose vectors have the largest inner product with its own (cosine, for L2-normalised
embeddings), leaving out:

- the passage itself and its duplicates (rows with the same ``key``, e.g. the text's hash);
- every passage of the same example (rows with the same ``group``), and their duplicates;
- repeated texts among the neighbours: a text appears once, as its lowest row index.

The order is defined exactly, so results do not depend on faiss's internals, on BLAS or on how
the work is blocked: score = the float64 inner product of the float32 vectors rounded to
``SCORE_DECIMALS`` decimals, descending; a tie goes to the lower passage index.

Two searches, chosen by the number of unique passages (``SearchSettings.exact_max``, default
200,000):

- **exact** (up to ``exact_max``): faiss's flat inner-product kernel (``faiss.knn``, what
  ``IndexFlatIP`` searches with) ranks candidates in float32, ``query_block`` queries against
  ``DB_CHUNK`` passages at a time, so memory beyond the vectors stays bounded. Candidates are
  re-scored in float64 and ranked as above. Whenever float32 rounding could have hidden a
  candidate that would tie or beat the k-th one, or too few candidates survive the exclusions,
  that query is answered by the brute force (``brute_force_neighbours``), so the result is
  always the exact one.
- **ivf** (above it): a faiss ``IndexIVFScalarQuantizer`` (inverted lists over k-means
  centroids, vectors stored as 8-bit codes: a quarter of the float32 size). Its candidates are
  re-scored from the float32 vectors in float64 and ranked by the same rule, so only
  *which* passages become candidates is approximate. Its recall@k against the exact search is
  measured on a seeded sample of the queries; ``nprobe`` (lists visited per query) is doubled
  from ``nprobe_start`` until the sample reaches ``recall_target`` (unless it is set), and
  the recall is returned with the result (asset metadata).

Vectors are read where they lie: pass a ``np.memmap`` (``vector_files.open_vectors``) and
the search slices it; it never turns vectors into Python lists, and copies at most one block of
rows at a time (plus the 8-bit index in ``ivf`` mode).

Determinism: the exact search is exact, so identical everywhere. The ``ivf`` search is
deterministic from ``SearchSettings.seed``: the k-means training sample is drawn with numpy from
the seed, k-means runs with faiss's ``seed`` (each centroid sums its points in row order), and rows
are added in a fixed order. A rerun on the same machine with the same faiss build and thread count
gives byte-identical neighbours (tested). Across CPUs, BLAS builds or thread counts, float32
rounding in the k-means and coarse assignments (BLAS products) may send a near-tied vector to
another list, so a few candidate sets may differ; the ranking rule itself never changes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

_log = logging.getLogger(__name__)

SCORE_DECIMALS = 6  # float32 embeddings carry ~7 significant digits; below this, scores are noise
QUERY_BLOCK = 4096
DB_CHUNK = 131_072  # passages scored against a query block at once (exact search)
BRUTE_CHUNK = 16_384  # passages turned into float64 at once by the brute force
RESCORE_BLOCK = 64  # queries whose candidates are gathered and re-scored in float64 at once
MARGIN = 8  # extra candidates fetched per query beyond k + its exclusions
EXACT_MAX = 200_000


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """When to leave the exact search, and how the ``ivf`` index is built and searched.

    Attributes:
        exact_max: the most unique passages searched exactly; above it, the ``ivf`` index.
        nlist: inverted lists (k-means centroids); None = ``2 * sqrt(unique passages)``.
        nprobe: lists visited per query; None = tuned on the recall sample (see ``recall_target``).
        nprobe_start: the first ``nprobe`` tried when tuning.
        recall_target: tuning stops at the first ``nprobe`` whose sample recall@k reaches it.
        recall_queries: seeded sample of queries on which recall@k against exact is measured (and
            ``nprobe`` tuned).
        heldout_queries: a second seeded sample, disjoint from the first, on which recall@k is
            measured after tuning (``recall_heldout``): the tuning sample's own recall is optimistic.
            0: none.
        train_per_list: k-means training points per list (drawn from the seed).
        kmeans_iters: k-means iterations.
        seed: the training sample, k-means and recall sample all come from it.
    """

    exact_max: int = EXACT_MAX
    nlist: int | None = None
    nprobe: int | None = None
    nprobe_start: int = 8
    recall_target: float = 0.99
    recall_queries: int = 1000
    heldout_queries: int = 1000
    train_per_list: int = 20
    kmeans_iters: int = 10
    seed: int = 0


@dataclass(slots=True)
class Neighbours:
    """Top-k per query row: ``indices[q]`` (passage rows, -1 padded) and their rounded ``scores[q]``."""

    indices: np.ndarray  # (n_queries, k) int64
    scores: np.ndarray  # (n_queries, k) float64, NaN where indices is -1
    fallbacks: int = 0  # queries answered by the brute force / exact search (near-ties, exclusions)
    wall_s: float = 0.0
    method: str = "exact"  # "exact" or "ivf"
    recall_at_k: float | None = None  # ivf: against the exact search on the sample; exact: 1.0
    recall_queries: int = 0
    index: dict[str, Any] = field(default_factory=dict)  # ivf: nlist, nprobe, build_s, ...
    recall_heldout: float | None = None  # ivf: the same, on queries nprobe was not tuned on
    heldout_queries: int = 0

    def metadata(self, prefix: str = "search") -> dict[str, Any]:
        """Flat values for asset metadata: method, recall@k and its sample, index settings."""
        out: dict[str, Any] = {
            f"{prefix}/method": self.method,
            f"{prefix}/fallbacks": self.fallbacks,
            f"{prefix}/wall_s": round(self.wall_s, 3),
            f"{prefix}/recall_queries": self.recall_queries,
        }
        if self.recall_at_k is not None:
            out[f"{prefix}/recall_at_k"] = round(self.recall_at_k, 5)
        if self.recall_heldout is not None:
            out[f"{prefix}/recall_heldout"] = round(self.recall_heldout, 5)
            out[f"{prefix}/heldout_queries"] = self.heldout_queries
        out |= {f"{prefix}/{k}": v for k, v in self.index.items()}
        return out


@dataclass(slots=True)
class _Layout:
    """Unique texts, their representative rows, and what each query may not get."""

    rep_rows: np.ndarray  # (u,) lowest row index of each unique key, ascending
    row_unique: np.ndarray  # (n,) unique id of each row
    row_group: np.ndarray | None  # (n,) group id of each row
    pairs: np.ndarray | None  # sorted codes group * u + unique of every (group, unique) present
    max_excluded: int  # the most unique texts one query excludes

    @property
    def n_unique(self) -> int:
        return len(self.rep_rows)

    def excluded_of(self, q: int) -> np.ndarray:
        """The unique ids query row ``q`` may not get (sorted)."""
        if self.pairs is None or self.row_group is None:
            return np.asarray([self.row_unique[q]], dtype=np.int64)
        g = int(self.row_group[q])
        u = self.n_unique
        lo, hi = np.searchsorted(self.pairs, [g * u, (g + 1) * u])
        return self.pairs[lo:hi] - g * u

    def excluded_mask(self, qrows: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """(B, F) True where candidate unique id ``cand[b, f]`` is excluded for query ``qrows[b]``."""
        out = cand == self.row_unique[qrows][:, None]
        if self.pairs is not None and self.row_group is not None and len(self.pairs):
            codes = self.row_group[qrows][:, None] * self.n_unique + cand
            pos = np.minimum(np.searchsorted(self.pairs, codes), len(self.pairs) - 1)
            out |= self.pairs[pos] == codes
        return out


def _codes(values: Sequence[Hashable] | np.ndarray, n: int, what: str) -> np.ndarray:
    """Integer ids, numbered in order of first appearance."""
    if len(values) != n:
        raise ValueError(f"{len(values)} {what} for {n} vectors")
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
        return rank[inverse.reshape(-1)]
    seen: dict[Hashable, int] = {}
    out = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = seen.setdefault(v, len(seen))
    return out


def _layout(
    n: int, keys: Sequence[Hashable] | np.ndarray | None, groups: Sequence[Hashable] | np.ndarray | None
) -> _Layout:
    if keys is None:
        row_unique = np.arange(n, dtype=np.int64)
        rep_rows = np.arange(n, dtype=np.int64)
    else:
        row_unique = _codes(keys, n, "keys")
        # ids follow first appearance, so the first rows come out ascending with the ids
        rep_rows = np.unique(row_unique, return_index=True)[1].astype(np.int64)
    if groups is None:
        return _Layout(rep_rows, row_unique, None, None, 1)
    row_group = _codes(groups, n, "groups")
    pairs = np.unique(row_group * len(rep_rows) + row_unique)
    per_group = np.bincount(pairs // max(len(rep_rows), 1)) if len(pairs) else np.zeros(1, np.int64)
    return _Layout(rep_rows, row_unique, row_group, pairs, int(per_group.max()))


def _rank(scores64: np.ndarray, rows: np.ndarray, keep: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query row, the top-k candidates: rounded score descending, then row ascending.

    ``scores64``, ``rows``, ``keep``: (B, F). Returns (B, k) rows (-1 padded) and scores (NaN padded).
    """
    rounded = np.where(keep, np.round(scores64, SCORE_DECIMALS), -np.inf)
    big = np.iinfo(np.int64).max
    order = np.lexsort((np.where(keep, rows, big), -rounded), axis=-1)[:, :k]
    idx = np.take_along_axis(np.where(keep, rows, -1), order, axis=1)
    sc = np.take_along_axis(rounded, order, axis=1)
    out_i = np.full((len(rows), k), -1, dtype=np.int64)
    out_s = np.full((len(rows), k), np.nan)
    width = idx.shape[1]
    out_i[:, :width] = idx
    out_s[:, :width] = np.where(idx >= 0, sc, np.nan)
    return out_i, out_s


def _rescore(
    x: np.ndarray, lay: _Layout, qrows: np.ndarray, cand: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exclusions, float64 scores and ranking of faiss's candidates (unique ids, -1 = none).

    Returns (indices, scores, eligible candidates per query).
    """
    valid = cand >= 0
    cu = np.where(valid, cand, 0)
    keep = valid & ~lay.excluded_mask(qrows, cu)
    rows = lay.rep_rows[cu]
    scores = np.empty(cu.shape, dtype=np.float64)
    for s in range(0, len(qrows), RESCORE_BLOCK):
        sub = slice(s, s + RESCORE_BLOCK)
        r = rows[sub]
        cv = np.asarray(x[r.reshape(-1)], dtype=np.float64).reshape(*r.shape, x.shape[1])
        qv = np.asarray(x[qrows[sub]], dtype=np.float64)
        scores[sub] = np.matmul(cv, qv[:, :, None])[..., 0]
        del cv, qv  # before the next block's gather: one block of candidates in float64 at a time
    idx, sc = _rank(scores, rows, keep, k)
    return idx, sc, keep.sum(axis=1)


def _rep_chunk(x: np.ndarray, lay: _Layout, start: int, stop: int) -> np.ndarray:
    """float32 C-contiguous vectors of unique ids [start, stop): a slice of ``x`` when no duplicates."""
    if len(lay.rep_rows) == len(x):
        return np.ascontiguousarray(x[start:stop], dtype=np.float32)
    return np.ascontiguousarray(x[lay.rep_rows[start:stop]], dtype=np.float32)


def _check(vectors: np.ndarray, k: int) -> np.ndarray:
    if not isinstance(vectors, np.ndarray):
        raise TypeError(f"vectors must be a numpy array (e.g. a np.memmap), got {type(vectors).__name__}")
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be 2-D, got shape {vectors.shape}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if vectors.dtype != np.float32:
        raise TypeError(f"vectors must be float32, got {vectors.dtype}")
    return vectors


def _query_rows(n: int, query_rows: Sequence[int] | np.ndarray | None) -> np.ndarray:
    return np.arange(n, dtype=np.int64) if query_rows is None else np.asarray(query_rows, dtype=np.int64)


def brute_force_neighbours(
    vectors: np.ndarray,
    k: int,
    *,
    keys: Sequence[Hashable] | np.ndarray | None = None,
    groups: Sequence[Hashable] | np.ndarray | None = None,
    query_rows: Sequence[int] | np.ndarray | None = None,
    query_block: int = 256,
) -> Neighbours:
    """The reference: every score in float64 with numpy, exclusions as a mask, the same order.

    Same arguments and result as ``nearest_neighbours``; memory ``query_block x n`` float64 scores
    (the vectors are read ``BRUTE_CHUNK`` rows at a time).
    """
    t0 = time.perf_counter()
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    qrows = _query_rows(len(x), query_rows)
    lay = _layout(len(x), keys, groups)
    return _brute_force(x, lay, qrows, k, query_block, t0)


def _brute_force(
    x: np.ndarray, lay: _Layout, qrows: np.ndarray, k: int, query_block: int, t0: float
) -> Neighbours:
    """Every score in float64, ``query_block`` queries against ``BRUTE_CHUNK`` passages at a time."""
    n_unique = lay.n_unique
    out_i = np.full((len(qrows), k), -1, dtype=np.int64)
    out_s = np.full((len(qrows), k), np.nan)
    for start in range(0, len(qrows), query_block):
        block = qrows[start : start + query_block]
        xq = np.asarray(x[block], dtype=np.float64)
        scores = np.empty((len(block), n_unique), dtype=np.float64)
        for s in range(0, n_unique, BRUTE_CHUNK):
            scores[:, s : s + BRUTE_CHUNK] = (
                xq @ np.asarray(_rep_chunk(x, lay, s, s + BRUTE_CHUNK), np.float64).T
            )
        np.round(scores, SCORE_DECIMALS, out=scores)
        for j, q in enumerate(block.tolist()):
            row = scores[j]
            row[lay.excluded_of(q)] = -np.inf
            if k < n_unique:  # every candidate at or above the k-th score, ties included
                cand = np.flatnonzero(row >= np.partition(row, n_unique - k)[n_unique - k])
            else:
                cand = np.arange(n_unique)
            cand = cand[np.isfinite(row[cand])]
            top = cand[np.lexsort((lay.rep_rows[cand], -row[cand]))[:k]]
            out_i[start + j, : len(top)] = lay.rep_rows[top]
            out_s[start + j, : len(top)] = row[top]
    return Neighbours(out_i, out_s, 0, time.perf_counter() - t0)


def _exact(
    x: np.ndarray, lay: _Layout, qrows: np.ndarray, k: int, query_block: int, log: logging.Logger, what: str
) -> tuple[np.ndarray, np.ndarray, int]:
    """Exact top-k of ``qrows``: faiss flat kernel over database chunks, float64 re-rank, fallbacks."""
    import faiss

    n_unique, dim = lay.n_unique, x.shape[1]
    fetch = min(n_unique, k + lay.max_excluded + MARGIN)
    out_i = np.full((len(qrows), k), -1, dtype=np.int64)
    out_s = np.full((len(qrows), k), np.nan)
    if not fetch or not len(qrows):
        return out_i, out_s, 0
    # A float32 inner product is off by at most ~dim * 2^-24 * |q| |x| (summation error bound);
    # doubled, plus the rounding to SCORE_DECIMALS, so a candidate faiss left out cannot be missed.
    max_norm = 0.0
    for s in range(0, n_unique, DB_CHUNK):
        max_norm = max(max_norm, float(np.linalg.norm(_rep_chunk(x, lay, s, s + DB_CHUNK), axis=1).max()))
    fallback: list[np.ndarray] = []
    t0 = last_log = time.perf_counter()
    for start in range(0, len(qrows), query_block):
        block = qrows[start : start + query_block]
        xq = np.ascontiguousarray(x[block], dtype=np.float32)
        best_d = best_i = None
        for s in range(0, n_unique, DB_CHUNK):  # merge each chunk's top-fetch into the running top
            d32, i32 = faiss.knn(
                xq, _rep_chunk(x, lay, s, s + DB_CHUNK), fetch, metric=faiss.METRIC_INNER_PRODUCT
            )
            i32 = np.where(i32 >= 0, i32 + s, -1)
            d32 = np.where(i32 >= 0, d32, -np.inf)
            if best_d is None:
                best_d, best_i = d32, i32
                continue
            d = np.concatenate([best_d, d32], axis=1)
            i = np.concatenate([best_i, i32], axis=1)
            top = np.argpartition(-d, fetch - 1, axis=1)[:, :fetch]
            best_d, best_i = np.take_along_axis(d, top, axis=1), np.take_along_axis(i, top, axis=1)
        assert best_d is not None and best_i is not None
        idx, sc, eligible = _rescore(x, lay, block, best_i, k)
        out_i[start : start + len(block)] = idx
        out_s[start : start + len(block)] = sc
        if fetch < n_unique:  # faiss left some out: could one of them tie or beat our k-th?
            q_norms = np.linalg.norm(xq, axis=1).astype(np.float64)
            err = 2.0 * dim * 2.0**-24 * q_norms * max_norm + 10.0**-SCORE_DECIMALS
            kth = np.where(eligible >= k, sc[:, -1], -np.inf)
            worst = best_d.min(axis=1).astype(np.float64)
            fallback.append(start + np.flatnonzero((eligible < k) | (kth <= worst + err)))
        now = time.perf_counter()
        if now - last_log >= 10.0:
            last_log = now
            done = start + len(block)
            log.info(f"neighbours ({what}): {done}/{len(qrows)} queries, {done / (now - t0):.0f} queries/s")
    fb = np.concatenate(fallback) if fallback else np.zeros(0, np.int64)
    if len(fb):
        exact = _brute_force(x, lay, qrows[fb], k, 8, time.perf_counter())
        out_i[fb], out_s[fb] = exact.indices, exact.scores
    return out_i, out_s, len(fb)


class _Ivf:
    """A seeded IVF-SQ8 index over the unique passages (ids = unique ids)."""

    def __init__(self, x: np.ndarray, lay: _Layout, settings: SearchSettings, log: logging.Logger) -> None:
        import faiss

        t0 = time.perf_counter()
        n_unique, dim = lay.n_unique, x.shape[1]
        self.nlist = max(1, min(settings.nlist or round(2 * math.sqrt(n_unique)), n_unique))
        n_train = min(n_unique, self.nlist * settings.train_per_list)
        rng = np.random.default_rng(settings.seed)
        sample = np.sort(rng.choice(n_unique, size=n_train, replace=False))
        xt = np.ascontiguousarray(x[lay.rep_rows[sample]], dtype=np.float32)
        cp = faiss.ClusteringParameters()
        cp.seed, cp.niter, cp.spherical = settings.seed, settings.kmeans_iters, True
        cp.max_points_per_centroid = settings.train_per_list  # the sample is already the right size
        cp.min_points_per_centroid = 1
        quantizer = faiss.IndexFlatIP(dim)
        # faiss sums each centroid's points in row order whatever the threads; the assignment is a
        # BLAS product, whose rounding may change with the thread count (module docstring)
        faiss.Clustering(dim, self.nlist, cp).train(xt, quantizer)
        self.index = faiss.IndexIVFScalarQuantizer(
            quantizer, dim, self.nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        self.index.train(xt)  # the quantizer is trained: this trains the 8-bit ranges only
        self.quantizer = quantizer  # the index does not own it
        for s in range(0, n_unique, DB_CHUNK):
            self.index.add(_rep_chunk(x, lay, s, s + DB_CHUNK))
        self.n_train = n_train
        self.build_s = time.perf_counter() - t0
        log.info(
            f"neighbours: IVF{self.nlist},SQ8 over {n_unique} unique passages"
            f" (k-means on {n_train}) built in {self.build_s:.1f}s"
        )

    def search(
        self, x: np.ndarray, lay: _Layout, qrows: np.ndarray, k: int, nprobe: int, query_block: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-k of ``qrows`` among the index's candidates; the queries with too few eligible ones."""
        self.index.nprobe = nprobe
        # more candidates than the exact search: the 8-bit scores may misorder close ones
        fetch = min(lay.n_unique, 2 * k + lay.max_excluded + MARGIN)
        out_i = np.full((len(qrows), k), -1, dtype=np.int64)
        out_s = np.full((len(qrows), k), np.nan)
        short: list[np.ndarray] = []
        want = np.minimum(k, lay.n_unique - lay.max_excluded)  # fewer than this means a starved query
        for start in range(0, len(qrows), query_block):
            block = qrows[start : start + query_block]
            _, cand = self.index.search(np.ascontiguousarray(x[block], dtype=np.float32), fetch)
            idx, sc, eligible = _rescore(x, lay, block, cand.astype(np.int64), k)
            out_i[start : start + len(block)] = idx
            out_s[start : start + len(block)] = sc
            short.append(start + np.flatnonzero(eligible < want))
        return out_i, out_s, np.concatenate(short) if short else np.zeros(0, np.int64)


def _recall(ann: np.ndarray, exact: np.ndarray) -> float:
    """Share of the exact top-k (valid entries) that the approximate top-k holds."""
    hits = total = 0
    for a, e in zip(ann, exact, strict=True):
        e = e[e >= 0]
        total += len(e)
        hits += int(np.isin(e, a).sum())
    return hits / total if total else 1.0


def nearest_neighbours(
    vectors: np.ndarray,
    k: int,
    *,
    keys: Sequence[Hashable] | np.ndarray | None = None,
    groups: Sequence[Hashable] | np.ndarray | None = None,
    query_rows: Sequence[int] | np.ndarray | None = None,
    query_block: int = QUERY_BLOCK,
    threads: int | None = None,
    settings: SearchSettings | None = None,
    log: logging.Logger | None = None,
) -> Neighbours:
    """Top-``k`` inner-product neighbours of each query row among the passage rows.

    Exact up to ``settings.exact_max`` unique passages, an IVF index above it (module docstring).

    Args:
        vectors: (n, d) float32 passage embeddings, in memory or a ``np.memmap`` (normalise them
            for cosine); never copied whole.
        k: neighbours per query.
        keys: per row, what makes two rows duplicates (e.g. the passage text's hash); None: none are.
            An integer array is factorised without Python objects.
        groups: per row, its example id: rows of the query's example are excluded; None: only itself.
        query_rows: rows to answer for (default: every row).
        query_block: queries searched at once (memory: ``query_block x fetch`` candidates).
        threads: faiss OpenMP threads (None: faiss's default).
        settings: the exact/IVF switch and the index's parameters (default ``SearchSettings()``).
        log: where progress lines go.

    Returns:
        ``Neighbours`` with ``indices[q]`` in rank order (score desc, row asc), -1 where fewer than k
        passages are eligible; ``method``, ``recall_at_k`` and ``index`` say how they were found.
    """
    import faiss

    t0 = time.perf_counter()
    log = log or _log
    settings = settings or SearchSettings()
    if threads:
        faiss.omp_set_num_threads(threads)
    x = _check(vectors, k)
    qrows = _query_rows(len(x), query_rows)
    lay = _layout(len(x), keys, groups)
    if lay.n_unique <= settings.exact_max:
        out_i, out_s, fb = _exact(x, lay, qrows, k, query_block, log, "exact")
        wall = time.perf_counter() - t0
        log.info(
            f"neighbours: exact top-{k} of {len(qrows)} queries over {lay.n_unique} unique passages"
            f" in {wall:.1f}s ({fb} by brute force)"
        )
        return Neighbours(out_i, out_s, fb, wall, "exact", 1.0, 0, {"exact_max": settings.exact_max})

    ivf = _Ivf(x, lay, settings, log)
    rng = np.random.default_rng(settings.seed + 1)
    sample = np.sort(rng.choice(len(qrows), size=min(settings.recall_queries, len(qrows)), replace=False))
    exact_i, _, _ = _exact(x, lay, qrows[sample], k, query_block, log, "recall sample")
    # held out: other queries, from their own seed, never used to choose nprobe
    others = np.setdiff1d(np.arange(len(qrows)), sample)
    heldout = np.sort(
        np.random.default_rng(settings.seed + 2).choice(
            others, size=min(settings.heldout_queries, len(others)), replace=False
        )
    )
    heldout_i = (
        _exact(x, lay, qrows[heldout], k, query_block, log, "held-out sample")[0] if len(heldout) else None
    )
    nprobe = min(settings.nprobe or settings.nprobe_start, ivf.nlist)
    tried: dict[int, float] = {}
    tried_heldout: dict[int, float] = {}
    search_qps: dict[int, float] = {}
    while True:
        t_probe = time.perf_counter()
        ann_i, _, _ = ivf.search(x, lay, qrows[sample], k, nprobe, query_block)
        search_qps[nprobe] = len(sample) / max(time.perf_counter() - t_probe, 1e-9)
        tried[nprobe] = recall = _recall(ann_i, exact_i)
        if heldout_i is not None:
            ann_h, _, _ = ivf.search(x, lay, qrows[heldout], k, nprobe, query_block)
            tried_heldout[nprobe] = _recall(ann_h, heldout_i)
        log.info(f"neighbours: nprobe={nprobe}: recall@{k}={recall:.4f} on {len(sample)} queries")
        if settings.nprobe or recall >= settings.recall_target or nprobe >= ivf.nlist:
            break
        nprobe = min(2 * nprobe, ivf.nlist)
    t_search = time.perf_counter()
    out_i, out_s, short = ivf.search(x, lay, qrows, k, nprobe, query_block)
    if len(short):  # the lists visited held too few eligible passages: those queries go exact
        ex_i, ex_s, _ = _exact(x, lay, qrows[short], k, query_block, log, "starved queries")
        out_i[short], out_s[short] = ex_i, ex_s
    wall = time.perf_counter() - t0
    log.info(
        f"neighbours: IVF top-{k} of {len(qrows)} queries over {lay.n_unique} unique passages in"
        f" {wall:.1f}s (nprobe={nprobe}, recall@{k}={recall:.4f}, {len(short)} exact)"
    )
    index = {
        "index": f"IVF{ivf.nlist},SQ8",
        "nlist": ivf.nlist,
        "nprobe": nprobe,
        "nprobe_recall": {str(p): round(r, 5) for p, r in tried.items()},
        "nprobe_recall_heldout": {str(p): round(r, 5) for p, r in tried_heldout.items()},
        "nprobe_queries_per_s": {str(p): round(v, 1) for p, v in search_qps.items()},
        "train_points": ivf.n_train,
        "build_s": round(ivf.build_s, 3),
        "search_s": round(time.perf_counter() - t_search, 3),
        "exact_max": settings.exact_max,
        "seed": settings.seed,
    }
    heldout_recall = tried_heldout.get(nprobe)
    return Neighbours(
        out_i, out_s, len(short), wall, "ivf", recall, len(sample), index, heldout_recall, len(heldout)
    )


def settings_dict(settings: SearchSettings) -> dict[str, Any]:
    """The settings as plain values (for run records and metadata)."""
    return asdict(settings)


def arrow_codes(column: Any) -> np.ndarray:
    """Integer ids of an Arrow column's values (equal values, equal ids), without Python objects.

    For ``keys=`` / ``groups=`` of ``nearest_neighbours`` straight from a Parquet column.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return pc.dictionary_encode(column).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def neighbours_table(rows: Any, nb: Neighbours) -> Any:
    """``row``, ``indices`` (list<int64>) and ``scores`` (list<float64>, null where NaN) as Arrow.

    Built from the arrays (offsets + flat values), never from Python lists.
    """
    import pyarrow as pa

    n, k = nb.indices.shape
    offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
    flat_scores = nb.scores.reshape(-1)
    scores = pa.array(flat_scores, pa.float64(), mask=np.isnan(flat_scores))
    return pa.table(
        {
            "row": rows,
            "indices": pa.ListArray.from_arrays(offsets, pa.array(nb.indices.reshape(-1), pa.int64())),
            "scores": pa.ListArray.from_arrays(offsets, scores),
        }
    )


def neighbours_from_table(table: Any) -> Neighbours:
    """The ``Neighbours`` of a ``neighbours_table`` (every row holds k entries)."""
    n = table.num_rows
    if n == 0:
        return Neighbours(np.zeros((0, 0), np.int64), np.zeros((0, 0)))
    idx = table["indices"].combine_chunks().flatten().to_numpy()
    sc = table["scores"].combine_chunks().flatten().fill_null(np.nan).to_numpy()
    return Neighbours(idx.reshape(n, -1).astype(np.int64), sc.reshape(n, -1).astype(np.float64))
