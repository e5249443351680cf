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
        """(indptr, indices, data) of ``scores_matrix``: the same product, without its counting pass.

        scipy sizes the product with a first pass over all the postings; a bound from the posting
        lengths (at most every document per query) serves as well and costs nothing. ``q``: the
        queries' matrix when already built.
        """
        q = self.query_matrix(queries) if q is None else q
        dt = self._doc_terms_t
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
        _csr_matmat(
            m, n, qp, qj, q.data, dt.indptr.astype(np.int32, copy=False), dt.indices, dt.data, cp, cj, cx
        )
        nnz = int(cp[-1])
        return cp, cj[:nnz], cx[:nnz]

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
        postings = self._postings()
        for start in range(begin, end, batch_size):
            batch = queries[start : min(start + batch_size, end)]
            q = self.query_matrix(batch)
            qp = q.indptr.tolist()
            # a query reading few postings is cheaper through the product than through the pruning
            rows = np.repeat(np.arange(len(batch)), np.diff(q.indptr))
            read = np.bincount(rows, weights=postings.lengths[q.indices], minlength=len(batch))
            hits: list[list[Hit] | None] = [None] * len(batch)
            for r in np.flatnonzero(read >= _PRUNE_MIN_POSTINGS).tolist():
                terms, weights = q.indices[qp[r] : qp[r + 1]], q.data[qp[r] : qp[r + 1]]
                hits[r] = _pruned_topk(postings, terms, weights, k, start + r, eligible)
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
        """The term-major postings with each term's largest weight, computed once per index."""
        cached = getattr(self, "_postings_cache", None)
        if cached is None:
            dt = self._doc_terms_t
            if not dt.has_sorted_indices:
                dt.sort_indices()  # documents in id order within a term: binary search below
            lengths = np.diff(dt.indptr)
            max_weight = np.zeros(dt.shape[0], dtype=np.float64)
            nonempty = lengths > 0
            if dt.nnz:
                max_weight[nonempty] = np.maximum.reduceat(dt.data, dt.indptr[:-1][nonempty])
            nonnegative = bool(dt.nnz == 0 or dt.data.min() >= 0)
            scratch = np.zeros(dt.shape[1], dtype=np.float64)
            slot = np.full(dt.shape[1], -1, dtype=np.int64)
            cached = _Postings(
                dt.indptr, dt.indices, dt.data, lengths, max_weight, nonnegative, scratch, slot
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
    indptr: np.ndarray
    docs: np.ndarray  # document indices, ascending within each term
    weights: np.ndarray
    lengths: np.ndarray
    max_weight: np.ndarray  # per term: the bound of its contribution to any document's score
    nonnegative: bool  # bounds hold only then (rank-bm25's floor is negative when the mean idf is)
    scratch: np.ndarray  # per-document partial sums, all 0 between queries
    slot: np.ndarray  # per-document place in a candidate list, all -1 between queries


# ours: the rarest terms' postings read first, for a score threshold: a quarter of the documents (the
# threshold is what prunes; at 100,000 documents this read about 1/7 of a query's postings in all)
_SEED_SHARE = 4
# ours: a query with fewer postings than this goes through the product (measured at 100,000 documents:
# the product ~8 ns a posting, the pruning ~0.4 ms a query plus the postings it reads)
_PRUNE_MIN_POSTINGS = 50_000
_THRESHOLD_POOL = 4  # ours: documents scored exactly per wanted one, for the threshold
_SEARCH_COST = 16  # ours: a binary search costs about this many steps of one pass over postings


def _accumulate(p: _Postings, terms: np.ndarray, weights: np.ndarray, picked: np.ndarray) -> list[np.ndarray]:
    """Add ``weight * term weight`` of the terms ``picked`` to ``p.scratch``; the documents touched."""
    touched = []
    scratch = p.scratch
    for i in picked.tolist():
        lo, hi = p.indptr[terms[i]], p.indptr[terms[i] + 1]
        docs = p.docs[lo:hi]
        scratch[docs] += weights[i] * p.weights[lo:hi]  # a term's documents are distinct
        touched.append(docs)
    return touched


def _pruned_topk(
    p: _Postings, terms: np.ndarray, weights: np.ndarray, k: int, qi: int, eligible: Eligible | None
) -> list[Hit] | None:
    """The hits of ``_row_topk`` without reading the long postings of common terms, or None (then the
    caller computes the full row).

    MaxScore, exact: the rarest terms' postings give partial scores, and the want-th best of them,
    ``theta``, is at most the want-th best full score. A term adds at most ``query weight *
    max_weight`` to any document, so the common terms whose bounds sum below ``theta`` (minus the
    rounding margin) are not read: a document needs its partial score from the other terms plus those
    bounds to reach ``theta``. The documents that do get their exact scores (``_exact_scores``), and
    every document whose rounded score reaches round(theta) is among them: ordered by (-rounded score,
    doc), they are the full order down to there, at least ``want`` documents.
    """
    if terms.size == 0 or not p.nonnegative or weights.min() < 0:
        return None
    want = k if eligible is None else max(4 * k, 32)
    lengths = p.lengths[terms]
    bounds = weights * p.max_weight[terms]
    by_length = np.argsort(lengths, kind="stable")
    budget = max(p.scratch.size // _SEED_SHARE, 1)
    n_rare = max(int(np.searchsorted(np.cumsum(lengths[by_length]), budget, "right")), 1)
    rare = by_length[:n_rare]
    scratch = p.scratch
    touched: list[np.ndarray] = []
    try:
        touched = _accumulate(p, terms, weights, rare)
        docs = np.concatenate(touched)
        theta = _threshold(p, terms, weights, docs, want, n_rare)
        if not np.round(theta, SCORE_DECIMALS) > 0:
            theta = 0.0  # no threshold: read every term, and zero scores follow in id order
        low = theta - _ROUND_MARGIN * max(1.0, abs(theta))
        # the common terms left unread: smallest bounds first, while their sum stays below low
        rest = by_length[n_rare:]
        rest = rest[np.argsort(bounds[rest], kind="stable")]
        skipped = int(np.searchsorted(np.cumsum(bounds[rest]), low, side="left")) if theta > 0 else 0
        unread, more = rest[:skipped], rest[skipped:]
        if more.size:
            touched += _accumulate(p, terms, weights, more)
            docs = np.concatenate(touched)
        if theta > 0:  # filter before deduplicating: the survivors are few, the postings read are not
            cand = _dedupe(p, docs[scratch[docs] + float(bounds[unread].sum()) >= low])
            cand = _narrow(p, terms, weights, bounds, unread, cand, scratch[cand], low)
        else:
            cand = _dedupe(p, docs)
    finally:
        for d in touched:
            scratch[d] = 0.0
    scores = np.round(_exact_scores(p, terms, weights, cand), SCORE_DECIMALS)
    # with theta, the documents reaching round(theta); without, every positive one
    valid = scores >= np.round(theta, SCORE_DECIMALS) if theta > 0 else scores > 0
    cand, scores = cand[valid], scores[valid]
    order = np.lexsort((cand, -scores))
    hits: list[Hit] = []
    if _take(hits, cand[order].tolist(), scores[order].tolist(), k, qi, eligible):
        return hits
    if theta > 0:
        return None  # too few eligible above theta: the full row goes further down
    return _zero_tail(hits, set(cand.tolist()), p.scratch.size, k, qi, eligible)


def _threshold(
    p: _Postings, terms: np.ndarray, weights: np.ndarray, docs: np.ndarray, want: int, n_read: int
) -> float:
    """A score that ``want`` documents reach (0.0 when fewer than ``want`` are in ``docs``): the
    want-th best exact score of the ``4 * want`` documents with the best partial scores in
    ``p.scratch``. A document is at most ``n_read`` times in ``docs``, so the ``4 * want * n_read``
    largest entries hold those documents."""
    values = p.scratch[docs]
    top = min(_THRESHOLD_POOL * want * n_read, values.size)
    if top < values.size:
        docs = docs[np.argpartition(values, values.size - top)[values.size - top :]]
    distinct = _dedupe(p, docs)
    if distinct.size < want:
        return 0.0
    if distinct.size > _THRESHOLD_POOL * want:
        partial = p.scratch[distinct]
        cut = distinct.size - _THRESHOLD_POOL * want
        distinct = np.sort(distinct[np.argpartition(partial, cut)[cut:]])
    exact = _exact_scores(p, terms, weights, distinct)
    return float(np.partition(exact, exact.size - want)[exact.size - want])


def _narrow(
    p: _Postings,
    terms: np.ndarray,
    weights: np.ndarray,
    bounds: np.ndarray,
    unread: np.ndarray,
    cand: np.ndarray,
    partial: np.ndarray,
    low: float,
) -> np.ndarray:
    """``cand`` less the documents that cannot reach ``low``: the unread terms' weights looked up for
    the candidates, largest bound first, each dropping those whose partial score plus the bounds still
    unread falls below it."""
    left = float(bounds[unread].sum())
    for i in unread[::-1].tolist():
        left -= float(bounds[i])
        partial = partial + weights[i] * _lookup(p, int(terms[i]), cand)
        keep = partial + max(left, 0.0) >= low
        cand, partial = cand[keep], partial[keep]
    return cand


def _lookup(p: _Postings, term: int, docs: np.ndarray) -> np.ndarray:
    """The weights of ``term`` for ``docs`` (sorted, unique; 0.0 where absent), by binary search."""
    lo, hi = int(p.indptr[term]), int(p.indptr[term + 1])
    if hi == lo or not docs.size:
        return np.zeros(docs.size, dtype=np.float64)
    plist = p.docs[lo:hi]
    pos = np.minimum(np.searchsorted(plist, docs), hi - lo - 1)
    return np.where(plist[pos] == docs, p.weights[lo + pos], 0.0)


def _exact_scores(p: _Postings, terms: np.ndarray, weights: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """The scores of ``docs`` (sorted, unique), bit for bit those of the sparse product.

    scipy's csr_matmat adds, for each document, ``query weight * term weight`` over the query row's
    stored term order, starting from 0; a term the document lacks adds nothing. This adds the same
    products in the same order (adding 0.0 leaves a float unchanged), so the rounded scores, and with
    them ties and output bytes, are the product's. A term's weights come from a binary search of its
    postings when they are long against ``docs``, else from one pass over them (``p.slot`` maps a
    document to its place in ``docs``).
    """
    acc = np.zeros(docs.size, dtype=np.float64)
    starts = p.indptr[terms].tolist()
    lengths = p.lengths[terms].tolist()
    passes = any(docs.size * _SEARCH_COST >= n for n in lengths)
    slot = p.slot
    if passes:
        slot[docs] = np.arange(docs.size)
    try:
        for t, w, lo, n in zip(terms.tolist(), weights.tolist(), starts, lengths, strict=True):
            if not n:
                continue
            if docs.size * _SEARCH_COST < n:
                col = _lookup(p, t, docs)
            else:
                col = np.zeros(docs.size, dtype=np.float64)
                place = slot[p.docs[lo : lo + n]]
                hit = place >= 0
                col[place[hit]] = p.weights[lo : lo + n][hit]
            acc = acc + w * col
    finally:
        if passes:
            slot[docs] = -1
    return acc


def _dedupe(p: _Postings, docs: np.ndarray) -> np.ndarray:
    """``docs`` without repeats, sorted (through ``p.slot``: one write per document wins, no hashing)."""
    slot, ranks = p.slot, np.arange(docs.size)
    slot[docs] = ranks
    unique = docs[slot[docs] == ranks]
    slot[unique] = -1
    unique.sort()
    return unique


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
        return _l2_normalize_rows(sp.csr_matrix(counts @ sp.diags(self.idf)))


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
