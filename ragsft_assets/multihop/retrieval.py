"""Sparse lexical retrieval: bigram tf-idf (cosine) and BM25 (Okapi), batched exact top-k.

Both indexes are scipy CSR matrices in float64 and rank documents by
``(-score, doc id)``. They are built to give the same top-k as the
straightforward references (checked in the tests):

- tf-idf = scikit-learn ``TfidfVectorizer(ngram_range=(2, 2))`` with its defaults
  (lowercase, token pattern ``(?u)\\b\\w\\w+\\b``, ``smooth_idf=True``,
  ``norm="l2"``, ``sublinear_tf=False``) and the cosine of the dense vectors;
- BM25 = rank-bm25 ``BM25Okapi(k1=1.5, b=0.75, epsilon=0.25)`` over the same
  tokenizer's unigrams (negative idf floored at ``epsilon * mean idf``; a
  repeated query token counts once per occurrence).

Scores are rounded to ``SCORE_DECIMALS`` before ranking so that two scores equal
up to float summation order are a tie, and ties go to the smaller document id.
Documents with score 0 rank last, in id order, like in the dense references.
"""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import scipy.sparse as sp

from ragsft_assets import worker_pools
from ragsft_assets.worker_pools import closing_pool, start_pool

try:
    from scipy.sparse._sparsetools import csr_matmat as _csr_matmat
except ImportError:  # pragma: no cover - another scipy layout
    _csr_matmat = None

TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern
SCORE_DECIMALS = 10
BM25_K1, BM25_B, BM25_EPSILON = 1.5, 0.75, 0.25
METHODS = ("tfidf", "bm25")

Eligible = Callable[[int, int], bool]  # (query index, document index) -> may this document be returned?


def tokenize(text: str) -> list[str]:
    """The one tokenizer of both methods: lowercase, then scikit-learn's default token pattern."""
    return TOKEN_RE.findall(text.lower())


class _Vocab:
    """Unigram ids assigned in first-seen order (the ids never reach the output)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def encode(self, tokens: list[str], grow: bool) -> np.ndarray:
        if grow:
            ids = self.ids
            out = [ids.setdefault(t, len(ids)) for t in tokens]
        else:
            out = [self.ids.get(t, -1) for t in tokens]
        return np.asarray(out, dtype=np.int64)

    def encode_corpus(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(unigram ids of all texts back to back, tokens per text), growing the vocabulary in text order."""
        token_lists = [tokenize(t) for t in texts]
        lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
        flat = list(chain.from_iterable(token_lists))
        ids = self.ids
        for t in dict.fromkeys(flat):  # first-seen order, like encode(grow=True) text by text
            ids.setdefault(t, len(ids))
        return np.fromiter(map(ids.__getitem__, flat), dtype=np.int64, count=len(flat)), lengths


def _bigram_codes(unigram_ids: np.ndarray, width: int) -> np.ndarray:
    """Codes of consecutive pairs (-1 when either side is unknown)."""
    if unigram_ids.size < 2:
        return np.empty(0, dtype=np.int64)
    left, right = unigram_ids[:-1], unigram_ids[1:]
    codes = left * width + right
    codes[(left < 0) | (right < 0)] = -1
    return codes


def _l2_normalize_rows(m: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sp.csr_matrix(sp.diags(1.0 / norms) @ m)


def _rows_to_csr(
    term_rows: list[np.ndarray], n_terms: int, weights: list[np.ndarray] | None = None
) -> sp.csr_matrix:
    """Count matrix from per-row term index arrays (duplicates summed)."""
    lengths = np.fromiter((r.size for r in term_rows), dtype=np.int64, count=len(term_rows))
    cols = np.concatenate(term_rows) if term_rows else np.empty(0, dtype=np.int64)
    rows = np.repeat(np.arange(len(term_rows), dtype=np.int64), lengths)
    data = np.concatenate(weights) if weights is not None else np.ones(cols.size, dtype=np.float64)
    m = sp.csr_matrix((data, (rows, cols)), shape=(len(term_rows), n_terms), dtype=np.float64)
    m.sum_duplicates()
    m.sort_indices()
    return m


@dataclass(slots=True)
class Hit:
    doc: int  # index into the index's (id-sorted) documents
    score: float


class SparseIndex:
    """A fitted index over documents sorted by id; ``search`` gives the exact top-k per query."""

    method: str = ""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        order = sorted(range(len(doc_ids)), key=lambda i: doc_ids[i])
        self.doc_ids: list[str] = [doc_ids[i] for i in order]
        if len(set(self.doc_ids)) != len(self.doc_ids):
            raise ValueError("duplicate document ids in the retrieval corpus")
        self._vocab = _Vocab()
        self._fit([texts[i] for i in order])

    @property
    def size(self) -> int:
        return len(self.doc_ids)

    def _fit(self, texts: list[str]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def query_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:  # pragma: no cover - abstract
        raise NotImplementedError

    def scores_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:
        """Sparse (queries x documents) scores: only documents sharing a term appear."""
        return sp.csr_matrix(self.query_matrix(queries) @ self._doc_terms_t)

    def _scores_arrays(
        self, queries: Sequence[str], q: sp.csr_matrix | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices, data) of ``scores_matrix`` (``_product``). ``q``: the queries' matrix
        when already built."""
        return _product(self.query_matrix(queries) if q is None else q, self._doc_terms_t)

    def prepare(self) -> None:
        """Build the pruned search's derived arrays now (term bounds, the document-major weights, the
        common terms' impacts: about the index's size again); ``search`` builds them on first use
        otherwise. Index-time work, like the index itself, hence a step of its own for timings."""
        self._postings()

    def __getstate__(self) -> dict:
        # the search workers receive the index pickled: the derived arrays (as large as the index) are
        # rebuilt there on first use rather than copied
        state = dict(self.__dict__)
        state.pop("_postings_cache", None)
        return state

    def search(
        self,
        queries: Sequence[str],
        k: int,
        eligible: Eligible | None = None,
        batch_size: int = 128,
        workers: int = 1,
    ) -> list[list[Hit]]:
        """The ``k`` best eligible documents per query (fewer when fewer are eligible).

        Args:
            queries: query texts.
            k: how many documents to return per query.
            eligible: ``eligible(query_index, doc_index)`` filters documents (golds,
                answer-bearing ones); called lazily, best-first, so it is cheap to pass.
            batch_size: queries per sparse matrix product (memory vs. overhead).
            workers: processes to split the query batches across; the hits are the same for
                any value. They start with forkserver (spawn where it is missing), never fork: a
                run may hold a live inference engine in this process, and forking its threads
                and device state is unsafe. Each worker receives the fitted index, the queries
                and ``eligible`` once, pickled, so ``eligible`` must be picklable (a module-level
                class or function).
        """
        n = len(queries)
        chunk = batch_size * _BATCHES_PER_TASK
        if workers <= 1 or n <= batch_size:
            return self._search_range(queries, 0, n, k, eligible, batch_size)
        state = (self, list(queries), k, eligible, batch_size)
        pool = start_pool(
            worker_context(), workers, _init_worker, (state,), mmap_threshold=WORKER_MMAP_THRESHOLD
        )
        with closing_pool(pool):
            parts = pool.map(_search_task, [(s, min(s + chunk, n)) for s in range(0, n, chunk)], 1)
        return [hits for part in parts for hits in part]

    def _search_range(
        self,
        queries: Sequence[str],
        begin: int,
        end: int,
        k: int,
        eligible: Eligible | None,
        batch_size: int,
    ) -> list[list[Hit]]:
        out: list[list[Hit]] = []
        term_lengths = np.diff(self._doc_terms_t.indptr)
        for start in range(begin, end, batch_size):
            batch = queries[start : min(start + batch_size, end)]
            q = self.query_matrix(batch)
            # a query reading few postings is cheaper through the product than through the pruning
            rows = np.repeat(np.arange(len(batch)), np.diff(q.indptr))
            read = np.bincount(rows, weights=term_lengths[q.indices], minlength=len(batch))
            hits: list[list[Hit] | None] = [None] * len(batch)
            pruned = np.flatnonzero(read >= _PRUNE_MIN_POSTINGS)
            if pruned.size:
                answers = _pruned_topk(
                    self._postings(),  # built on first use: short queries alone never need it
                    self._doc_terms_t,
                    q[pruned],
                    k,
                    (pruned + start).tolist(),
                    eligible,
                )
                for r, h in zip(pruned.tolist(), answers, strict=True):
                    hits[r] = h
            rest = [r for r in range(len(batch)) if hits[r] is None]  # also those not certified
            if rest:
                indptr, indices, data = self._scores_arrays([], q[rest])
                for j, r in enumerate(rest):
                    lo, hi = indptr[j], indptr[j + 1]
                    hits[r] = _row_topk(data[lo:hi], indices[lo:hi], self.size, k, start + r, eligible)
            for h in hits:
                assert h is not None  # every row was answered by one path or the other
                out.append(h)
        return out

    def _search_range_product(
        self,
        queries: Sequence[str],
        begin: int,
        end: int,
        k: int,
        eligible: Eligible | None,
        batch_size: int,
    ) -> list[list[Hit]]:
        """The same hits from the full sparse product of every batch (the reference the tests hold
        ``_search_range`` to; it reads every posting of every query term)."""
        out: list[list[Hit]] = []
        for start in range(begin, end, batch_size):
            indptr, indices, data = self._scores_arrays(queries[start : min(start + batch_size, end)])
            indptr = indptr.tolist()
            for r in range(len(indptr) - 1):
                lo, hi = indptr[r], indptr[r + 1]
                out.append(_row_topk(data[lo:hi], indices[lo:hi], self.size, k, start + r, eligible))
        return out

    def _postings(self) -> _Postings:
        """The term bounds and the document-major weights of the pruned search, computed once per index."""
        cached = getattr(self, "_postings_cache", None)
        if cached is None:
            dt = self._doc_terms_t
            lengths = np.diff(dt.indptr)
            max_weight = np.zeros(dt.shape[0], dtype=np.float64)
            nonempty = lengths > 0
            if dt.nnz:
                max_weight[nonempty] = np.maximum.reduceat(dt.data, dt.indptr[:-1][nonempty])
            nonnegative = bool(dt.nnz == 0 or dt.data.min() >= 0)
            by_doc = sp.csr_matrix(dt.T)
            by_doc.sum_duplicates()  # canonical: terms ascending within a document (one entry each already)
            common = np.argsort(-lengths, kind="stable")[: min(_IMPACT_TERMS, dt.shape[0])]
            common = common[lengths[common] > 0]
            impact_col = np.full(dt.shape[0], -1, dtype=np.int64)
            impact_col[common] = np.arange(common.size)
            impacts = np.zeros((common.size, dt.shape[1]), dtype=np.uint8)
            for c, t in enumerate(common.tolist()):
                lo, hi = dt.indptr[t], dt.indptr[t + 1]
                if max_weight[t] > 0:  # (all weights 0 otherwise: code 0 bounds them)
                    # ceil: 255 * code / 255 * max_weight is at least the weight (the rounding margin
                    # covers the division's last bit)
                    codes = np.ceil(dt.data[lo:hi] / max_weight[t] * 255.0)
                    impacts[c, dt.indices[lo:hi]] = np.clip(codes, 0, 255).astype(np.uint8)
            cached = _Postings(
                lengths,
                max_weight,
                nonnegative,
                by_doc,
                np.ones(dt.shape[0], dtype=np.float64),
                impact_col,
                impacts,
            )
            self._postings_cache = cached
        return cached


_BATCHES_PER_TASK = 1
# Each query batch allocates and frees arrays of up to ~150 MB (the product's bound, the vocabulary-wide
# term arrays): served from the heap, not a fresh mmap each (see worker_pools).
WORKER_MMAP_THRESHOLD = 256 << 20
_WORKER_STATE: tuple | None = None  # (index, queries, k, eligible, batch_size), set once per worker
_SAMPLE_STRIDE = 32
_ROUND_MARGIN = 1e-8  # relative; far above the rounding step (5e-11) plus float error


def worker_context() -> multiprocessing.context.BaseContext:
    """The search pool's start method: the shared fork server, with this module preloaded, so a worker
    starts without copying the caller's process (which may hold a live inference engine) or importing."""
    return worker_pools.worker_context((__name__,))


def _init_worker(state: tuple) -> None:
    global _WORKER_STATE
    _WORKER_STATE = state


def _search_task(bounds: tuple[int, int]) -> list[list[Hit]]:
    index, queries, k, eligible, batch_size = _WORKER_STATE  # type: ignore[misc]
    return index._search_range(queries, bounds[0], bounds[1], k, eligible, batch_size)


def _row_topk(
    raw: np.ndarray, indices: np.ndarray, n_docs: int, k: int, qi: int, eligible: Eligible | None
) -> list[Hit]:
    """Exact top-k of one score row under the (-rounded score, doc index) order.

    Only positive rounded scores rank; the rest of the documents follow with score 0, in id order.
    Rounding is monotone, so the want-th best rounded score is the rounding of the want-th best raw one,
    and only raw scores just below that can round up to it: only those candidates get rounded.
    """
    n = raw.size
    hits: list[Hit] = []
    taken = 0  # candidates already examined, best-first: a prefix of the full order
    want = max(4 * k, 32)
    while want < n:
        pool = None
        if n >= 2 * _SAMPLE_STRIDE * want:
            # the want-th best of every stride-th score is at most the want-th best of all: a cheap floor
            sample = raw[::_SAMPLE_STRIDE]
            floor = sample[np.argpartition(sample, sample.size - want)[sample.size - want]]
            pool = np.flatnonzero(raw >= floor)
            pooled = raw[pool]
            pivot = np.partition(pooled, pooled.size - want)[pooled.size - want]
        else:
            pivot = np.partition(raw, n - want)[n - want]
        threshold = np.round(pivot, SCORE_DECIMALS)
        if not threshold > 0:
            break  # fewer than want positive scores: rank them all below
        low = pivot - _ROUND_MARGIN * max(1.0, abs(float(pivot)))
        cand = pool[pooled >= low] if pool is not None and low >= floor else np.flatnonzero(raw >= low)
        rounded = np.round(raw[cand], SCORE_DECIMALS)
        keep = rounded >= threshold  # every score at least the want-th best, ties included
        sel, vals = indices[cand[keep]], rounded[keep]
        order = np.lexsort((sel, -vals))
        if eligible is None:
            top = order[:k]
            return [Hit(d, v) for d, v in zip(sel[top].tolist(), vals[top].tolist(), strict=True)]
        if _take(hits, sel[order[taken:]].tolist(), vals[order[taken:]].tolist(), k, qi, eligible):
            return hits
        taken = order.size
        want = max(4 * want, order.size + 1)
    data = np.round(raw, SCORE_DECIMALS)
    positive = data > 0
    data, indices = data[positive], indices[positive]
    order = np.lexsort((indices, -data))[taken:]
    if _take(hits, indices[order].tolist(), data[order].tolist(), k, qi, eligible):
        return hits
    return _zero_tail(hits, set(indices.tolist()), n_docs, k, qi, eligible)


def _zero_tail(
    hits: list[Hit], positive: set[int], n_docs: int, k: int, qi: int, eligible: Eligible | None
) -> list[Hit]:
    """``hits`` completed with zero-score documents, in id order, after every positive one."""
    for d in range(n_docs):
        if d in positive or (eligible is not None and not eligible(qi, d)):
            continue
        hits.append(Hit(d, 0.0))
        if len(hits) == k:
            break
    return hits


@dataclass(slots=True)
class _Postings:
    lengths: np.ndarray  # postings per term
    max_weight: np.ndarray  # per term: the bound of its contribution to any document's score
    nonnegative: bool  # bounds hold only then (rank-bm25's floor is negative when the mean idf is)
    by_doc: sp.csr_matrix  # the same weights document-major (documents x terms, terms ascending)
    ones: np.ndarray  # one per term: the row sums of an elementwise product, through csr_matvec
    impact_col: np.ndarray  # per term: its column in ``impacts``, -1 for the terms not there
    # the most common terms x documents: ceil(255 * weight / max_weight), 0 if absent; term-major, as a
    # batch's candidates read the few most common terms' rows, which stay in cache
    impacts: np.ndarray


# ours: the rarest terms' postings read first, for a score threshold and the candidates: up to a
# quarter of the documents' worth (at 100,000 documents, ~15,000 of a query's ~146,000 postings;
# the common terms left are looked up only for the candidates)
_SEED_SHARE = 4
# ours: a query with fewer postings than this goes through the product (the pruning's fixed cost,
# a few numpy calls per query, is worth it only above; measured at 100,000 documents)
_PRUNE_MIN_POSTINGS = 50_000
_THRESHOLD_POOL = 4  # ours: documents scored exactly per wanted one, for the threshold
# ours: the terms with the longest postings get a byte per document bounding their weight there
# (``impacts``): documents x 128 bytes (12.8 MB at 100,000 documents). On the bench's corpus the
# candidates left to score exactly fell from ~700 a query (one bound per term) to ~8 (64 terms: ~9)
_IMPACT_TERMS = 128


def _product(q: sp.csr_matrix, dt: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, data) of ``q @ dt``, without scipy's counting pass.

    scipy sizes the product with a first pass over all the postings; a bound from the posting
    lengths (at most every document per query) serves as well and costs nothing. Within a row the
    documents come in no particular order; each score adds ``query weight * term weight`` over the
    query row's stored terms, in that order, from 0.
    """
    m, n = q.shape[0], dt.shape[1]
    postings = np.diff(dt.indptr)[q.indices]
    rows = np.repeat(np.arange(m), np.diff(q.indptr))
    bound = int(np.minimum(np.bincount(rows, weights=postings, minlength=m), n).sum())
    limit = np.iinfo(np.int32).max
    if _csr_matmat is None or max(bound, dt.nnz, n, dt.shape[0]) >= limit or dt.indices.dtype != np.int32:
        s = sp.csr_matrix(q @ dt)  # pragma: no cover - another scipy layout or a huge product
        return s.indptr, s.indices, s.data
    cp = np.empty(m + 1, dtype=np.int32)
    cj = np.empty(bound, dtype=np.int32)
    cx = np.empty(bound, dtype=np.float64)
    qp, qj = q.indptr.astype(np.int32), q.indices.astype(np.int32)
    _csr_matmat(m, n, qp, qj, q.data, dt.indptr.astype(np.int32, copy=False), dt.indices, dt.data, cp, cj, cx)
    nnz = int(cp[-1])
    return cp, cj[:nnz], cx[:nnz]


def _pair_scores(p: _Postings, q: sp.csr_matrix, rows: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """The scores of the documents ``docs`` for the query rows ``rows`` (pairwise), bit for bit those
    of the sparse product.

    scipy's csr_matmat adds, for each document, ``query weight * term weight`` over the query row's
    stored terms (ascending: ``q`` is canonical), from 0. Here each pair's query row and document row
    (both canonical) are multiplied elementwise, which scipy does by merging them: the products of the
    terms both hold, ascending; csr_matvec then adds each row's products in that order from 0 (times
    1.0, exact). Same products, same order: the same float, hence the same rounded scores and ties.
    """
    if not rows.size:
        return np.zeros(0, dtype=np.float64)
    return sp.csr_matrix(q[rows]).multiply(p.by_doc[docs]) @ p.ones


def _pruned_topk(
    p: _Postings, dt: sp.csr_matrix, q: sp.csr_matrix, k: int, qis: list[int], eligible: Eligible | None
) -> list[list[Hit] | None]:
    """The hits of ``_row_topk`` for every query row of ``q`` (canonical), without reading the common
    terms' postings: a row's hits, or None where the caller must compute the full row.

    MaxScore, exact, batched: a few numpy/scipy calls per batch and per row, none per term.

    1. Per query, its rarest terms (the seed, ``_SEED_SHARE``) are read for all rows at once, one
       sparse product: partial scores. Each other term adds at most its bound (query weight times
       the term's largest weight) to any document: ``unread`` in all.
    2. ``theta``, the want-th best exact score of the ``4 * want`` documents with the best partial
       scores, is at most the want-th best full score.
    3. If ``unread`` is below ``theta`` (less the rounding margin), a document with no seed term
       cannot reach it, and every document whose score rounds to round(theta) or more has a partial
       score that ``unread`` lifts to it; the common terms' bytes (``impacts``) bound those
       candidates closer, and the few left get exact scores (``_pair_scores``). Ordered by (-rounded
       score, doc), the ones at or above round(theta) are the full order's prefix, at least ``want``
       documents: the first k eligible of them are the row's hits.
    4. Rows whose ``unread`` reaches theta are read again with every term but those of smallest
       bounds that stay below it (theta stands). Rows still uncertified, or with too few eligible
       above theta, are None.
    """
    m = q.shape[0]
    out: list[list[Hit] | None] = [None] * m
    if not m or not q.nnz or not p.nonnegative or q.data.min() < 0 or not q.has_canonical_format:
        return out  # (a query matrix stored otherwise would add in another order than _pair_scores)
    want = k if eligible is None else max(4 * k, 32)
    counts = np.diff(q.indptr)
    row_of = np.repeat(np.arange(m), counts)
    lengths = p.lengths[q.indices]
    bounds = q.data * p.max_weight[q.indices]
    # 1. the seed: per row, the shortest postings while their total stays within the budget (one at least)
    by_length = np.lexsort((lengths, row_of))  # rows stay in place; within a row, shortest first
    total = np.concatenate(([0], np.cumsum(lengths[by_length])))
    first = q.indptr[:-1]
    within = total[1:] - np.repeat(total[first], counts)
    rank = np.arange(q.nnz) - np.repeat(first, counts)
    seed = np.zeros(q.nnz, dtype=bool)
    seed[by_length] = (within <= max(dt.shape[1] // _SEED_SHARE, 1)) | (rank == 0)
    rows = _Rows(q, row_of, bounds, want, k, qis, eligible)
    theta, low, retry = _prune_round(p, dt, rows, seed, np.ones(m, dtype=bool), None, out)
    if retry.any():
        # 4. unread: the non-seed terms of smallest bounds while their sum stays below low
        by_bound = np.lexsort((bounds, seed, row_of))  # per row: non-seed first, smallest bound first
        total = np.concatenate(([0], np.cumsum(np.where(seed, 0.0, bounds)[by_bound])))
        within = total[1:] - np.repeat(total[first], counts)
        unread = np.zeros(q.nnz, dtype=bool)
        unread[by_bound] = ~seed[by_bound] & (within < low[row_of[by_bound]])
        _prune_round(p, dt, rows, ~unread, retry, theta, out)
    return out


@dataclass(slots=True)
class _Rows:
    """A batch of query rows under pruning, and what every round needs of them."""

    q: sp.csr_matrix
    row_of: np.ndarray  # per entry of q, its row
    bounds: np.ndarray  # per entry of q, the most that term adds to any document's score
    want: int
    k: int
    qis: list[int]
    eligible: Eligible | None


def _prune_round(
    p: _Postings,
    dt: sp.csr_matrix,
    rows: _Rows,
    seed: np.ndarray,
    active: np.ndarray,
    theta: np.ndarray | None,
    out: list[list[Hit] | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pass of ``_pruned_topk`` over the ``active`` rows, reading the ``seed`` entries' postings;
    sets ``out`` for the rows it certifies. Returns (theta, low, the rows to read again)."""
    q, row_of, bounds, want = rows.q, rows.row_of, rows.bounds, rows.want
    m = q.shape[0]
    seed = seed & active[row_of]
    rest = ~seed & active[row_of]
    unread = np.bincount(row_of[rest], weights=bounds[rest], minlength=m)
    seed_q = sp.csr_matrix(
        (
            q.data[seed],
            q.indices[seed],
            np.concatenate(([0], np.cumsum(np.bincount(row_of[seed], minlength=m)))),
        ),
        shape=q.shape,
    )
    sp_, sj, sx = _product(seed_q, dt)
    ptr = sp_.tolist()
    if theta is None:
        # 2. theta: the want-th best exact score of the documents with the best partial scores
        pool = _THRESHOLD_POOL * want
        picked, picked_rows = [], []
        for r in np.flatnonzero(active & (np.diff(sp_) >= want)).tolist():
            lo, hi = ptr[r], ptr[r + 1]
            if hi - lo <= pool:
                picked.append(np.arange(lo, hi))
            else:
                seg = sx[lo:hi]
                cut = np.partition(seg, hi - lo - pool)[hi - lo - pool]
                picked.append(np.flatnonzero(seg >= cut) + lo)  # at least pool (ties kept)
            picked_rows.append(r)
        theta = np.zeros(m, dtype=np.float64)
        if picked:
            at = np.concatenate(picked)
            pool_rows = np.repeat(picked_rows, [a.size for a in picked])
            exact = _pair_scores(p, q, pool_rows, sj[at])
            order = np.lexsort((-exact, pool_rows))  # per row, best first
            start = np.concatenate(([0], np.cumsum(np.bincount(pool_rows, minlength=m))))[:-1]
            theta[picked_rows] = exact[order][start[picked_rows] + want - 1]
    low = theta - _ROUND_MARGIN * np.maximum(1.0, np.abs(theta))
    floor = np.round(theta, SCORE_DECIMALS)
    # 3. certified rows: a threshold above 0 that no document without a seed term can reach
    ok = active & (floor > 0) & (unread < low)
    retry = active & (floor > 0) & ~ok
    need = (low - unread).tolist()
    parts, part_rows = [], []
    for r in np.flatnonzero(ok).tolist():
        lo, hi = ptr[r], ptr[r + 1]
        parts.append(np.flatnonzero(sx[lo:hi] >= need[r]) + lo)
        part_rows.append(r)
    if parts:
        _certify(p, rows, sx, sj, parts, part_rows, low, floor, unread, rest, out)
    # a row with every term read holds the product's own row: answered here whatever theta was
    for r in np.flatnonzero(active & (np.bincount(row_of[rest], minlength=m) == 0)).tolist():
        if out[r] is None:
            lo, hi = ptr[r], ptr[r + 1]
            out[r] = _row_topk(sx[lo:hi], sj[lo:hi], dt.shape[1], rows.k, rows.qis[r], rows.eligible)
    return theta, low, retry & ~np.array([h is not None for h in out])


def _certify(
    p: _Postings,
    rows: _Rows,
    sx: np.ndarray,
    sj: np.ndarray,
    parts: list[np.ndarray],
    part_rows: list[int],
    low: np.ndarray,
    floor: np.ndarray,
    unread: np.ndarray,
    rest: np.ndarray,
    out: list[list[Hit] | None],
) -> None:
    """Step 3 of ``_pruned_topk`` for the rows ``part_rows``, whose candidates' places in the partial
    product (``sx``, ``sj``) are ``parts``."""
    q, row_of, bounds = rows.q, rows.row_of, rows.bounds
    m = q.shape[0]
    cand = np.concatenate(parts)
    cand_rows = np.repeat(part_rows, [a.size for a in parts])
    cand_docs = sj[cand]
    # the unread common terms' bytes bound each candidate closer: what is left to score exactly is
    # little more than the documents that reach theta
    cols = p.impact_col[q.indices]
    table = rest & (cols >= 0)
    loose = unread - np.bincount(row_of[table], weights=bounds[table], minlength=m)  # terms outside it
    per_row = np.bincount(row_of[table], minlength=m)
    n_items = per_row[cand_rows]
    item_cand = np.repeat(np.arange(cand.size), n_items)
    starts = (
        np.concatenate(([0], np.cumsum(per_row)))[cand_rows] - np.concatenate(([0], np.cumsum(n_items)))[:-1]
    )
    t_pos = np.flatnonzero(table)[np.repeat(starts, n_items) + np.arange(item_cand.size)]
    codes = p.impacts.ravel()[cols[t_pos] * p.impacts.shape[1] + cand_docs[item_cand]]
    extra = np.bincount(item_cand, weights=codes * (bounds[t_pos] / 255.0), minlength=cand.size)
    tight = sx[cand] + extra + loose[cand_rows] >= low[cand_rows]
    cand_rows, cand_docs = cand_rows[tight], cand_docs[tight]
    scores = np.round(_pair_scores(p, q, cand_rows, cand_docs), SCORE_DECIMALS)
    keep = scores >= floor[cand_rows]
    cand_rows, cand_docs, scores = cand_rows[keep], cand_docs[keep], scores[keep]
    order = np.lexsort((cand_docs, -scores, cand_rows))
    docs_l, scores_l = cand_docs[order].tolist(), scores[order].tolist()
    ends = np.cumsum(np.bincount(cand_rows, minlength=m)).tolist()
    for r in part_rows:
        lo = ends[r - 1] if r else 0
        hits: list[Hit] = []
        if _take(hits, docs_l[lo : ends[r]], scores_l[lo : ends[r]], rows.k, rows.qis[r], rows.eligible):
            out[r] = hits


def _take(
    hits: list[Hit], docs: list[int], scores: list[float], k: int, qi: int, eligible: Eligible | None
) -> bool:
    """Append the eligible ones of best-first candidates until there are k hits; whether there are."""
    for d, v in zip(docs, scores, strict=True):
        if eligible is None or eligible(qi, d):
            hits.append(Hit(d, v))
            if len(hits) == k:
                return True
    return len(hits) == k


class TfidfBigramIndex(SparseIndex):
    """Bigram tf-idf with l2-normalized rows; scores are cosines."""

    method = "tfidf"

    def _fit(self, texts: list[str]) -> None:
        unigrams, lengths = self._vocab.encode_corpus(texts)
        self._width = max(len(self._vocab.ids), 1)
        # consecutive pairs inside one text (the pair from a text's last token to the next text's first is not one)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)[:-1]
        inside = np.ones(max(unigrams.size - 1, 0), dtype=bool)
        last = np.cumsum(lengths) - 1
        inside[last[(last >= 0) & (last < inside.size)]] = False
        codes = (unigrams[:-1] * self._width + unigrams[1:])[inside]
        self._codes, terms = np.unique(codes, return_inverse=True)  # sorted: the bigram vocabulary
        counts = sp.csr_matrix(
            (np.ones(terms.size, dtype=np.float64), (rows[inside], terms.ravel())),
            shape=(len(texts), self._codes.size),
            dtype=np.float64,
        )
        counts.sum_duplicates()
        counts.sort_indices()
        n = counts.shape[0]
        df = np.bincount(counts.indices, minlength=self._codes.size).astype(np.float64)
        self.idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
        weighted = sp.csr_matrix(counts @ sp.diags(self.idf))
        self._doc_terms_t = sp.csr_matrix(_l2_normalize_rows(weighted).T)

    def query_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:
        term_rows = []
        for q in queries:
            codes = _bigram_codes(self._vocab.encode(tokenize(q), grow=False), self._width)
            codes = codes[codes >= 0]
            pos = np.searchsorted(self._codes, codes)
            pos = np.minimum(pos, max(self._codes.size - 1, 0))
            known = self._codes.size > 0
            term_rows.append(pos[self._codes[pos] == codes] if known else np.empty(0, dtype=np.int64))
        counts = _rows_to_csr(term_rows, self._codes.size)
        # What ``_l2_normalize_rows(counts @ sp.diags(self.idf))`` gives, bit for bit (test), without
        # its scipy calls sized by the bigram vocabulary (a diagonal built, and arrays of one entry
        # per bigram allocated, for every batch: most of a query's time at 100,000 documents): the
        # weights count * idf; the squares added per row in ascending term order by np.add.reduceat,
        # as the elementwise product and its row sums did; each weight times 1 / norm.
        weights = counts.data * self.idf[counts.indices]
        lengths = np.diff(counts.indptr)
        nonempty = np.flatnonzero(lengths)
        squares = np.zeros(counts.shape[0], dtype=np.float64)
        if nonempty.size:
            squares[nonempty] = np.add.reduceat(weights * weights, counts.indptr[nonempty])
        norms = np.sqrt(squares)
        norms[norms == 0] = 1.0
        inverse = np.repeat(1.0 / norms, lengths)
        return sp.csr_matrix((inverse * weights, counts.indices, counts.indptr), shape=counts.shape)


class BM25Index(SparseIndex):
    """BM25 as one sparse weight matrix, in one of two scoring variants.

    ``variant="okapi"`` (the default, what the asset uses) is rank-bm25's ``BM25Okapi`` exactly: idf
    ``log((N - df + 0.5) / (df + 0.5))`` with negative values floored at ``epsilon`` times the mean idf,
    and the term weight ``tf * (k1 + 1) / (tf + norm)``. ``variant="lucene"`` is bm25s'
    ``method="lucene"``: idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` (never negative, no floor) and
    ``tf / (tf + norm)``; the benchmark checks identity against bm25s under it.
    """

    method = "bm25"

    def __init__(
        self,
        doc_ids: Sequence[str],
        texts: Sequence[str],
        k1: float = BM25_K1,
        b: float = BM25_B,
        epsilon: float = BM25_EPSILON,
        variant: str = "okapi",
    ) -> None:
        if variant not in ("okapi", "lucene"):
            raise ValueError(f"unknown BM25 variant {variant!r}: expected 'okapi' or 'lucene'")
        self.k1, self.b, self.epsilon, self.variant = k1, b, epsilon, variant
        super().__init__(doc_ids, texts)

    def _fit(self, texts: list[str]) -> None:
        unigrams, lengths = self._vocab.encode_corpus(texts)
        n_terms = len(self._vocab.ids)
        n = len(texts)
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        tf = sp.csr_matrix(
            (np.ones(unigrams.size, dtype=np.float64), (rows, unigrams)), shape=(n, n_terms), dtype=np.float64
        )
        tf.sum_duplicates()
        tf.sort_indices()
        doc_len = lengths.astype(np.float64)
        avgdl = doc_len.sum() / n if n else 1.0
        df = np.bincount(tf.indices, minlength=n_terms).astype(np.float64)
        if self.variant == "lucene":
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
        else:
            idf = np.log(n - df + 0.5) - np.log(df + 0.5)
            # rank-bm25 floors negative idf at epsilon * (mean of the raw idf values)
            floor = self.epsilon * (idf.sum() / n_terms) if n_terms else 0.0
            idf[idf < 0] = floor
        self.idf = idf
        rows = np.repeat(np.arange(n), np.diff(tf.indptr))
        freq = tf.data
        norm = self.k1 * (1 - self.b + self.b * doc_len[rows] / avgdl)
        scale = 1.0 if self.variant == "lucene" else self.k1 + 1
        weights = idf[tf.indices] * (freq * scale / (freq + norm))
        w = sp.csr_matrix((weights, tf.indices, tf.indptr), shape=tf.shape)
        self._doc_terms_t = sp.csr_matrix(w.T)

    def query_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:
        term_rows = []
        for q in queries:
            ids = self._vocab.encode(tokenize(q), grow=False)
            term_rows.append(ids[ids >= 0])
        return _rows_to_csr(term_rows, len(self._vocab.ids))


def build_index(method: str, doc_ids: Sequence[str], texts: Sequence[str]) -> SparseIndex:
    """An index of the given method (``tfidf`` or ``bm25``)."""
    if method == "tfidf":
        return TfidfBigramIndex(doc_ids, texts)
    if method == "bm25":
        return BM25Index(doc_ids, texts)
    raise ValueError(f"unknown retrieval method {method!r}: expected one of {METHODS}")
