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

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

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

    def search(
        self,
        queries: Sequence[str],
        k: int,
        eligible: Eligible | None = None,
        batch_size: int = 128,
    ) -> list[list[Hit]]:
        """The ``k`` best eligible documents per query (fewer when fewer are eligible).

        Args:
            queries: query texts.
            k: how many documents to return per query.
            eligible: ``eligible(query_index, doc_index)`` filters documents (golds,
                answer-bearing ones); called lazily, best-first, so it is cheap to pass.
            batch_size: queries per sparse matrix product (memory vs. overhead).
        """
        out: list[list[Hit]] = []
        for start in range(0, len(queries), batch_size):
            scores = self.scores_matrix(queries[start : start + batch_size])
            for r in range(scores.shape[0]):
                lo, hi = scores.indptr[r], scores.indptr[r + 1]
                out.append(
                    _row_topk(scores.data[lo:hi], scores.indices[lo:hi], self.size, k, start + r, eligible)
                )
        return out


def _row_topk(
    data: np.ndarray, indices: np.ndarray, n_docs: int, k: int, qi: int, eligible: Eligible | None
) -> list[Hit]:
    """Exact top-k of one score row under the (-rounded score, doc index) order."""
    data = np.round(data, SCORE_DECIMALS)
    positive = data > 0
    data, indices = data[positive], indices[positive]
    n = data.size
    hits: list[Hit] = []
    taken = 0  # ordered positive candidates already examined
    want = min(n, max(4 * k, 32))
    while len(hits) < k and taken < n:
        if want < n:
            # every candidate scoring at least the want-th best (ties included): a prefix of the full order
            threshold = -np.partition(-data, want - 1)[want - 1]
            sel = np.flatnonzero(data >= threshold)
        else:
            sel = np.arange(n)
        sel = sel[np.lexsort((indices[sel], -data[sel]))]
        for j in sel[taken:]:
            taken += 1
            d = int(indices[j])
            if eligible is None or eligible(qi, d):
                hits.append(Hit(d, float(data[j])))
                if len(hits) == k:
                    break
        want = min(n, max(4 * want, sel.size + 1))
    if len(hits) < k:
        # zero-score documents, in id order, after every positive one
        seen = set(indices.tolist())
        for d in range(n_docs):
            if d in seen or (eligible is not None and not eligible(qi, d)):
                continue
            hits.append(Hit(d, 0.0))
            if len(hits) == k:
                break
    return hits


class TfidfBigramIndex(SparseIndex):
    """Bigram tf-idf with l2-normalized rows; scores are cosines."""

    method = "tfidf"

    def _fit(self, texts: list[str]) -> None:
        unigram_rows = [self._vocab.encode(tokenize(t), grow=True) for t in texts]
        self._width = max(len(self._vocab.ids), 1)
        code_rows = [_bigram_codes(u, self._width) for u in unigram_rows]
        all_codes = np.concatenate(code_rows) if code_rows else np.empty(0, dtype=np.int64)
        self._codes = np.unique(all_codes[all_codes >= 0])  # sorted: the bigram vocabulary
        term_rows = [np.searchsorted(self._codes, c) for c in code_rows]
        counts = _rows_to_csr(term_rows, self._codes.size)
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
    """Okapi BM25 exactly as rank-bm25's ``BM25Okapi`` computes it, as one sparse weight matrix."""

    method = "bm25"

    def __init__(
        self,
        doc_ids: Sequence[str],
        texts: Sequence[str],
        k1: float = BM25_K1,
        b: float = BM25_B,
        epsilon: float = BM25_EPSILON,
    ) -> None:
        self.k1, self.b, self.epsilon = k1, b, epsilon
        super().__init__(doc_ids, texts)

    def _fit(self, texts: list[str]) -> None:
        term_rows = [self._vocab.encode(tokenize(t), grow=True) for t in texts]
        n_terms = len(self._vocab.ids)
        tf = _rows_to_csr(term_rows, n_terms)
        n = tf.shape[0]
        doc_len = np.fromiter((r.size for r in term_rows), dtype=np.float64, count=n)
        avgdl = doc_len.sum() / n if n else 1.0
        df = np.bincount(tf.indices, minlength=n_terms).astype(np.float64)
        idf = np.log(n - df + 0.5) - np.log(df + 0.5)
        # rank-bm25 floors negative idf at epsilon * (mean of the raw idf values)
        floor = self.epsilon * (idf.sum() / n_terms) if n_terms else 0.0
        idf[idf < 0] = floor
        self.idf = idf
        rows = np.repeat(np.arange(n), np.diff(tf.indptr))
        freq = tf.data
        norm = self.k1 * (1 - self.b + self.b * doc_len[rows] / avgdl)
        weights = idf[tf.indices] * (freq * (self.k1 + 1) / (freq + norm))
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
